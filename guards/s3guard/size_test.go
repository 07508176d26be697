package s3guard

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/s3guard/awsclient"
	"github.com/fencekit/fencekit/guards/s3guard/s3client"
)

// readOnly hides every method but Read (no io.Seeker: the content is
// counted as the client reads it).
type readOnly struct{ r io.Reader }

func (o readOnly) Read(p []byte) (int, error) { return o.r.Read(p) }

// seekingClient records whether each Put body it passes on is an
// io.Seeker.
type seekingClient struct {
	s3client.Client
	mu     sync.Mutex
	seeker []bool
}

func (c *seekingClient) Put(ctx context.Context, bucket, key string, body io.Reader, size int64, opts s3client.PutOptions) (s3client.ObjectInfo, error) {
	_, ok := body.(io.Seeker)
	c.mu.Lock()
	c.seeker = append(c.seeker, ok)
	c.mu.Unlock()
	return c.Client.Put(ctx, bucket, key, body, size, opts)
}

// TestPutSizeMismatchWritesNothing: content shorter or longer than the
// declared size is a *fence.SizeError (fence.ErrSizeMismatch), with both clients, for
// content held inline, uploaded from an io.ReadSeeker (measured before the
// upload), uploaded from a plain reader (counted while the client reads it,
// below and above awsclient's part size) and staged by Stage; nothing is
// published, no data object is left, and the mark is not raised. Before
// the check, content longer than size was stored cut to size (inline, and
// minio-go with an io.ReadSeeker) and the other mismatches failed with the
// client's untyped error.
func TestPutSizeMismatchWritesNothing(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		ctx := testCtx(t)
		big := strings.Repeat("b", awsclient.PartSize+10)
		cases := []struct {
			name   string
			inline int
			r      io.Reader
			size   int64
			read   int64 // SizeError.Read
			stage  bool  // through Stage in Fence, not PutClaim
		}{
			{"inline short", 16, strings.NewReader("abc"), 4, 3, false},
			{"inline long", 16, strings.NewReader("abcde"), 4, 5, false},
			{"inline long plain", 16, readOnly{strings.NewReader("abcde")}, 4, 5, false},
			{"inline empty long", 0, readOnly{strings.NewReader("abcde")}, 0, 1, false},
			{"seeker short", 0, strings.NewReader("abc"), 4, 3, false},
			{"seeker long", 0, strings.NewReader("abcde"), 4, 5, false},
			{"plain short", 0, readOnly{strings.NewReader("abc")}, 4, 3, false},
			{"plain long", 0, readOnly{strings.NewReader("abcde")}, 4, 5, false},
			{"seeker big long", 0, strings.NewReader(big), int64(len(big)) - 1, int64(len(big)), false},
			{"plain big short", 0, readOnly{strings.NewReader(big)}, int64(len(big)) + 1, int64(len(big)), false},
			{"plain big long", 0, readOnly{strings.NewReader(big)}, int64(len(big)) - 1, int64(len(big)), false},
			{"Stage plain long", 0, readOnly{strings.NewReader("abcde")}, 4, 5, true},
			{"Stage seeker short", 0, bytes.NewReader([]byte("abc")), 4, 3, true},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				s := e.store(t, nil, func(cfg *Config) { cfg.InlineMax = c.inline })
				resource := "size/" + strings.ReplaceAll(c.name, " ", "-")
				var err error
				if c.stage {
					err = s.Fence(ctx, resource, 3, func(ctx context.Context) error {
						return Stage(ctx, c.r, c.size, PutOptions{})
					})
				} else {
					_, err = s.Put(fence.WithClaim(ctx, fence.Claim{Token: 3}), resource, c.r, c.size, PutOptions{})
				}
				require.ErrorIs(t, err, fence.ErrSizeMismatch)
				var se *fence.SizeError
				require.ErrorAs(t, err, &se)
				assert.Equal(t, fence.SizeError{Source: "s3guard", Resource: resource, Size: c.size, Read: c.read}, *se)
				assert.Contains(t, err.Error(), resource)
				m, err := s.Mark(ctx, resource)
				require.NoError(t, err)
				assert.Equal(t, fence.Claim{}, m, "mark after a size mismatch")
				_, _, err = s.GetBytes(ctx, resource)
				assert.ErrorIs(t, err, fence.ErrNotFound)
			})
		}
		assert.Empty(t, e.listAll(t), "objects left by size mismatches")
	})
}

// exactClient reads exactly size bytes of a Put body of known size and
// uploads them, as a client that never reads past the declared length
// would.
type exactClient struct{ s3client.Client }

func (c exactClient) Put(ctx context.Context, bucket, key string, body io.Reader, size int64, opts s3client.PutOptions) (s3client.ObjectInfo, error) {
	if size >= 0 {
		b := make([]byte, size)
		if _, err := io.ReadFull(body, b); err != nil {
			return s3client.ObjectInfo{}, err
		}
		body = bytes.NewReader(b)
	}
	return c.Client.Put(ctx, bucket, key, body, size, opts)
}

// TestPutSizeLongAfterUpload: with a client that reads only the declared
// size, content that goes on is seen after the data object was uploaded:
// a *fence.SizeError, the data object is removed, nothing is published.
func TestPutSizeLongAfterUpload(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		ctx := testCtx(t)
		s := e.store(t, exactClient{e.client}, nil)
		_, err := s.Put(fence.WithClaim(ctx, fence.Claim{Token: 3}), "size/after", readOnly{strings.NewReader("abcde")}, 4, PutOptions{})
		var se *fence.SizeError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, fence.SizeError{Source: "s3guard", Resource: "size/after", Size: 4, Read: 5}, *se)
		m, err := s.Mark(ctx, "size/after")
		require.NoError(t, err)
		assert.Equal(t, fence.Claim{}, m)
		assert.Empty(t, e.listAll(t), "objects left after the mismatch")
		// The same client stores content of the declared size.
		_, err = s.Put(fence.WithClaim(ctx, fence.Claim{Token: 3}), "size/after", readOnly{strings.NewReader("abcd")}, 4, PutOptions{})
		require.NoError(t, err)
		got, _ := content(t, s, "size/after")
		assert.Equal(t, "abcd", got)
	})
}

// TestPutSizeExact: content of the declared size is stored whole on every
// path (inline, io.ReadSeeker, plain reader below and above awsclient's
// part size, a reader positioned past its start, the ctx form); an
// io.ReadSeeker reaches the client as an io.Seeker, so the client may
// stream and rewind it.
func TestPutSizeExact(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		ctx := testCtx(t)
		big := strings.Repeat("0123456789", awsclient.PartSize/10+7)
		offset := strings.NewReader("skip:" + "after the prefix")
		_, err := offset.Seek(5, io.SeekStart)
		require.NoError(t, err)
		cases := []struct {
			name   string
			inline int
			r      io.Reader
			body   string
			seeker bool // the client got an io.Seeker (false: not uploaded, or wrapped)
		}{
			{"inline", 16, readOnly{strings.NewReader("abcd")}, "abcd", false},
			{"inline seeker", 16, strings.NewReader("abcd"), "abcd", false},
			{"empty", 0, strings.NewReader(""), "", false},
			{"seeker", 0, strings.NewReader("abcd"), "abcd", true},
			{"plain", 0, readOnly{strings.NewReader("abcd")}, "abcd", false},
			{"seeker big", 0, strings.NewReader(big), big, true},
			{"plain big", 0, readOnly{strings.NewReader(big)}, big, false},
			{"seeker at an offset", 0, offset, "after the prefix", true},
		}
		for i, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				rec := &seekingClient{Client: e.client}
				s := e.store(t, rec, func(cfg *Config) { cfg.InlineMax = c.inline })
				resource := "exact/" + strings.ReplaceAll(c.name, " ", "-")
				info, err := s.Put(fence.WithToken(ctx, fence.Token(i+1)), resource, c.r, int64(len(c.body)), PutOptions{})
				require.NoError(t, err)
				assert.Equal(t, int64(len(c.body)), info.Size)
				got, _, err := s.GetBytes(ctx, resource)
				require.NoError(t, err)
				assert.True(t, string(got) == c.body, "read back %d bytes, want %d", len(got), len(c.body))
				if c.seeker {
					require.NotEmpty(t, rec.seeker)
					assert.True(t, rec.seeker[0], "the data object's Put body is an io.Seeker")
				}
			})
		}
	})
}
