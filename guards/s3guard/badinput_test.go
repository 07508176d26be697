package s3guard

import (
	"context"
	"encoding/base64"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/s3guard/s3client"
)

// ops runs every Guard entry point on key with token; each must fail.
func ops(s *Guard, key string, tok fence.Token) map[string]error {
	ctx := context.Background()
	m := map[string]error{}
	_, m["Put"] = s.PutBytes(fence.WithClaim(ctx, fence.ClaimFor(ctx, tok)), key, []byte("bad"), PutOptions{})
	_, m["Delete"] = s.Delete(fence.WithClaim(ctx, fence.ClaimFor(ctx, tok)), key)
	m["Fence"] = s.Fence(ctx, key, tok, func(ctx context.Context) error {
		return Stage(ctx, strings.NewReader("bad"), 3, PutOptions{})
	})
	_, _, m["Get"] = s.GetBytes(ctx, key)
	_, m["Mark"] = s.Mark(ctx, key)
	_, m["Sweep"] = s.Sweep(ctx, key)
	return m
}

func TestBadInput(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		s := e.store(t, nil, nil)
		_, err := put(t, s, "keep", 5, "kept")
		require.NoError(t, err)
		before := e.snapshot(t)

		t.Run("keys", func(t *testing.T) {
			for _, key := range []string{
				"", "a\x00b", "nl\nx", "\x7f", "\xff\xfe", string([]byte{'a', 0xc3}),
				strings.Repeat("k", fence.MaxResourceLen+1), strings.Repeat("k", 1025),
				strings.Repeat("s", MaxSegmentLen+1), "a/" + strings.Repeat("s", MaxSegmentLen+1) + "/b",
				"/lead", "trail/", "a//b", "a/./b", "../up", "a/..", ".", "back\\slash",
				DefaultDataPrefix + "keep/0000000000000000005-0123456789abcdef0123456789abcdef",
				"_fencekit", "_fencekit/data",
				// Only white space: minio-go trims such names to nothing.
				" ", "   ", "\u00a0", " \u2003 ",
			} {
				for op, err := range ops(s, key, 9) {
					var ke *fence.ResourceError
					assert.ErrorAs(t, err, &ke, "%s(%q)", op, key)
					assert.ErrorIs(t, err, fence.ErrInvalidResource, "%s(%q)", op, key)
				}
			}
		})

		t.Run("tokens", func(t *testing.T) {
			for _, tok := range []fence.Token{0, -1, math.MinInt64} {
				_, err := s.PutBytes(fence.WithClaim(testCtx(t), fence.ClaimFor(testCtx(t), tok)), "keep", []byte("bad"), PutOptions{})
				assert.ErrorIs(t, err, fence.ErrInvalidToken, "Put token %d", tok)
				_, err = s.Delete(fence.WithClaim(testCtx(t), fence.ClaimFor(testCtx(t), tok)), "keep")
				assert.ErrorIs(t, err, fence.ErrInvalidToken, "Delete token %d", tok)
				err = s.Fence(testCtx(t), "fresh", tok, func(context.Context) error { return nil })
				assert.ErrorIs(t, err, fence.ErrInvalidToken, "Fence token %d", tok)
			}
		})

		t.Run("options", func(t *testing.T) {
			for i, o := range []PutOptions{
				{ContentType: "text/plain\r\nX-Evil: 1"},
				{ContentType: strings.Repeat("t", 257)},
				{ContentType: "tëxt"},
				{Metadata: map[string]string{"bad key": "v"}},
				{Metadata: map[string]string{"": "v"}},
				{Metadata: map[string]string{"k": "ctl\x01"}},
				{Metadata: map[string]string{"k": "\xff"}},
				{Metadata: map[string]string{"k": strings.Repeat("v", MaxMetadataSize)}},
			} {
				_, err := s.PutBytes(fence.WithClaim(testCtx(t), fence.ClaimFor(testCtx(t), 6)), "keep", []byte("bad"), o)
				assert.ErrorIs(t, err, ErrInvalidOptions, "case %d", i)
			}
			_, err := s.Put(fence.WithClaim(testCtx(t), fence.ClaimFor(testCtx(t), 6)), "keep", strings.NewReader("x"), -2, PutOptions{})
			assert.ErrorIs(t, err, ErrInvalidOptions)
		})

		assert.Equal(t, before, e.snapshot(t), "bad input must change nothing")
		got, info := content(t, s, "keep")
		assert.Equal(t, "kept", got)
		assert.Equal(t, fence.Token(5), info.Token)

		// The limits themselves are fine: a fence.MaxResourceLen key, a MaxSegmentLen
		// segment.
		for _, key := range []string{strings.Repeat("k/", fence.MaxResourceLen/2-1) + "kk", strings.Repeat("s", MaxSegmentLen)} {
			require.Len(t, key, map[bool]int{true: fence.MaxResourceLen, false: MaxSegmentLen}[len(key) > MaxSegmentLen])
			_, err := put(t, s, key, 1, "edge")
			require.NoError(t, err, "%d-byte key", len(key))
			got, _ := content(t, s, key)
			assert.Equal(t, "edge", got)
		}
	})
}

// TestForeignObjectAtKey: whatever someone else stored at a key, if it is
// not an s3guard pointer the guard refuses to read through it or overwrite
// it (*fence.ForeignError), and leaves it exactly as it was.
func TestForeignObjectAtKey(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		s := e.store(t, nil, nil)
		id := newWriteID()
		dk := dataKey(DefaultDataPrefix, "foreign", 3, id)
		valid := fmt.Sprintf(`{"fencekit":"s3guard/v1","token":"3","write_id":%q,"deleted":false,"data":%q,"etag":"abc","size":1}`, id, dk)
		_, err := decodePointer(DefaultDataPrefix, "foreign", []byte(valid))
		require.NoError(t, err, "the template must be valid for the cases to mean anything")

		swap := func(old, new string) string {
			require.Contains(t, valid, old)
			return strings.Replace(valid, old, new, 1)
		}
		inl := func(fields string) string {
			return fmt.Sprintf(`{"fencekit":"s3guard/v1","token":"3","write_id":%q,"deleted":false,%s}`, id, fields)
		}
		_, err = decodePointer(DefaultDataPrefix, "foreign", []byte(inl(`"inline":"eA==","size":1`)))
		require.NoError(t, err, "the inline template must be valid")
		cases := map[string]string{
			"plain content":         "hello, I am a CSV file\n",
			"empty object":          "",
			"binary":                "\x00\x01\x02\xff",
			"empty JSON":            "{}",
			"JSON array":            "[1,2]",
			"unknown field":         swap(`"size":1`, `"size":1,"extra":true`),
			"wrong format":          swap(`s3guard/v1`, `s3guard/v2`),
			"token zero":            swap(`"token":"3"`, `"token":"0"`),
			"token number":          swap(`"token":"3"`, `"token":3`),
			"token leading zero":    swap(`"token":"3"`, `"token":"03"`),
			"token negative":        swap(`"token":"3"`, `"token":"-3"`),
			"token missing":         swap(`"token":"3",`, ``),
			"bad write id":          swap(id, strings.ToUpper(id)),
			"data elsewhere":        swap(dk, "secrets/other-object"),
			"data of another key":   swap(dk, dataKey(DefaultDataPrefix, "other", 3, id)),
			"data token above":      swap(dk, dataKey(DefaultDataPrefix, "foreign", 4, id)),
			"missing etag":          swap(`"etag":"abc",`, ``),
			"negative size":         swap(`"size":1`, `"size":-1`),
			"tombstone with data":   swap(`"deleted":false`, `"deleted":true`),
			"trailing data":         valid + `{}`,
			"duplicate-ish garbage": valid + ` x`,
			"inline and data":       swap(`"size":1`, `"size":1,"inline":"eA=="`),
			"inline size mismatch":  inl(`"inline":"eA==","size":2`),
			"inline with etag":      inl(`"inline":"eA==","etag":"abc","size":1`),
			"inline not base64":     inl(`"inline":"%%%","size":1`),
			"inline too big":        inl(`"inline":"` + base64.StdEncoding.EncodeToString(make([]byte, MaxInline+1)) + `","size":` + fmt.Sprint(MaxInline+1)),
			"tombstone with inline": strings.Replace(inl(`"inline":"eA==","size":0`), `"deleted":false`, `"deleted":true`, 1),
			"oversize":              swap(`"size":1`, `"size":1,"content_type":"`+strings.Repeat("x", MaxPointerSize)+`"`),
		}
		for name, body := range cases {
			t.Run(name, func(t *testing.T) {
				key := "foreign"
				_, err := e.rawPut(t, key, []byte(body), minio.PutObjectOptions{ContentType: "text/csv"})
				require.NoError(t, err)
				before := e.snapshot(t)
				for op, err := range ops(s, key, 100) {
					var pe *fence.ForeignError
					require.ErrorAs(t, err, &pe, "%s", op)
					assert.ErrorIs(t, err, fence.ErrForeign, "%s", op)
					assert.Equal(t, key, pe.Resource)
				}
				assert.Equal(t, before, e.snapshot(t), "nothing may change")
				raw, _, err := e.rawGet(t, key)
				require.NoError(t, err)
				assert.Equal(t, body, string(raw))
			})
		}
	})
}

func TestNewValidates(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		for name, cfg := range map[string]Config{
			"nil client":        {Bucket: e.bucket},
			"empty bucket":      {Client: e.client},
			"prefix without /":  {Client: e.client, Bucket: e.bucket, DataPrefix: "data"},
			"prefix leading /":  {Client: e.client, Bucket: e.bucket, DataPrefix: "/data/"},
			"prefix empty seg":  {Client: e.client, Bucket: e.bucket, DataPrefix: "a//"},
			"prefix dot-dot":    {Client: e.client, Bucket: e.bucket, DataPrefix: "../"},
			"prefix NUL":        {Client: e.client, Bucket: e.bucket, DataPrefix: "a\x00/"},
			"prefix too long":   {Client: e.client, Bucket: e.bucket, DataPrefix: strings.Repeat("p", 460) + "/"},
			"negative attempts": {Client: e.client, Bucket: e.bucket, MaxAttempts: -1},
			"negative backoff":  {Client: e.client, Bucket: e.bucket, ConflictBackoff: -1},
		} {
			s, err := New(cfg)
			assert.ErrorIs(t, err, fence.ErrInvalidConfig, name)
			assert.Nil(t, s, name)
		}
		s, err := New(Config{Client: e.client, Bucket: e.bucket})
		require.NoError(t, err)
		assert.Equal(t, DefaultDataPrefix, s.prefix)
		assert.Equal(t, DefaultMaxAttempts, s.max)
		assert.Equal(t, DefaultConflictBackoff, s.backoff)

		// A custom prefix is used for data objects, and keys under it are refused.
		s, err = New(Config{Client: e.client, Bucket: e.bucket, DataPrefix: "blobs/"})
		require.NoError(t, err)
		info, err := put(t, s, "doc", 1, "x")
		require.NoError(t, err)
		assert.True(t, strings.HasPrefix(info.DataKey, "blobs/doc/"), info.DataKey)
		_, err = put(t, s, "blobs/x", 1, "x")
		assert.ErrorIs(t, err, fence.ErrInvalidResource)
	})
}

// TestAdapterKeyCheck: both adapters refuse keys of only white space (and
// empty ones) themselves, with an error matching fence.ErrInvalidResource,
// before sending anything; minio-go alone would fail with an untyped error.
func TestAdapterKeyCheck(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		ctx := testCtx(t)
		before := e.snapshot(t)
		for _, key := range []string{"", " ", "   ", "\u00a0", "\t"} {
			_, err := e.client.Put(ctx, e.bucket, key, strings.NewReader("x"), 1, s3client.PutOptions{})
			assert.ErrorIs(t, err, fence.ErrInvalidResource, "Put(%q)", key)
			_, _, err = e.client.Get(ctx, e.bucket, key, s3client.GetOptions{})
			assert.ErrorIs(t, err, fence.ErrInvalidResource, "Get(%q)", key)
			_, err = e.client.Head(ctx, e.bucket, key)
			assert.ErrorIs(t, err, fence.ErrInvalidResource, "Head(%q)", key)
			assert.ErrorIs(t, e.client.Delete(ctx, e.bucket, key), fence.ErrInvalidResource, "Delete(%q)", key)
		}
		assert.Equal(t, before, e.snapshot(t))
	})
}
