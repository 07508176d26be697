package s3guard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/memguard"
)

func TestPutGetRoundTrip(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		s := e.store(t, nil, nil)
		ctx := testCtx(t)

		_, _, err := s.GetBytes(ctx, "a/b.txt")
		var nf *fence.NotFoundError
		require.ErrorAs(t, err, &nf)
		assert.False(t, nf.Deleted)
		assert.Zero(t, nf.Token)
		tok, err := s.Mark(ctx, "a/b.txt")
		require.NoError(t, err)
		assert.Zero(t, tok.Token)

		info, err := s.PutBytes(fence.WithClaim(ctx, fence.ClaimFor(ctx, 5)), "a/b.txt", []byte("hello"), PutOptions{ContentType: "text/plain", Metadata: map[string]string{"owner": "run-a"}})
		require.NoError(t, err)
		assert.Equal(t, fence.Token(5), info.Token)
		assert.Equal(t, int64(5), info.Size)
		assert.Equal(t, dataKey(DefaultDataPrefix, "a/b.txt", 5, info.WriteID), info.DataKey)

		got, gi := content(t, s, "a/b.txt")
		assert.Equal(t, "hello", got)
		assert.Equal(t, info, gi)
		assert.Equal(t, "run-a", gi.Metadata["owner"])
		assert.Equal(t, "text/plain", gi.ContentType)

		tok, err = s.Mark(ctx, "a/b.txt")
		require.NoError(t, err)
		assert.Equal(t, fence.Token(5), tok.Token)

		// A plain S3 reader: GET the pointer, then GET the data key it names.
		body, _, err := e.rawGet(t, "a/b.txt")
		require.NoError(t, err)
		var p struct {
			Format string `json:"fencekit"`
			Token  string `json:"token"`
			Data   string `json:"data"`
			ETag   string `json:"etag"`
		}
		require.NoError(t, json.Unmarshal(body, &p))
		assert.Equal(t, PointerFormat, p.Format)
		assert.Equal(t, "5", p.Token)
		raw, st, err := e.rawGet(t, p.Data)
		require.NoError(t, err)
		assert.Equal(t, "hello", string(raw))
		assert.Equal(t, "text/plain", st.ContentType)
		assert.Equal(t, p.ETag, st.ETag)

		// Overwrite with a higher token: the superseded data object is removed.
		info2, err := put(t, s, "a/b.txt", 6, "world")
		require.NoError(t, err)
		got, _ = content(t, s, "a/b.txt")
		assert.Equal(t, "world", got)
		assert.ElementsMatch(t, []string{"a/b.txt", info2.DataKey}, e.listAll(t))

		// Equal token is accepted (same acquisition retrying).
		_, err = put(t, s, "a/b.txt", 6, "again")
		require.NoError(t, err)
		got, gi = content(t, s, "a/b.txt")
		assert.Equal(t, "again", got)
		assert.Equal(t, fence.Token(6), gi.Token)
	})
}

func TestGetReader(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		s := e.store(t, nil, nil)
		ctx := testCtx(t)
		big := strings.Repeat("0123456789abcdef", 64<<10) // 1 MiB
		_, err := s.Put(fence.WithClaim(ctx, fence.ClaimFor(ctx, 3)), "big", strings.NewReader(big), int64(len(big)), PutOptions{})
		require.NoError(t, err)
		rc, info, err := s.Get(ctx, "big")
		require.NoError(t, err)
		b, err := io.ReadAll(rc)
		require.NoError(t, err)
		require.NoError(t, rc.Close())
		assert.Equal(t, big, string(b))
		assert.Equal(t, int64(len(big)), info.Size)

		// Unknown length (multipart upload) works too.
		_, err = s.Put(fence.WithClaim(ctx, fence.ClaimFor(ctx, 3)), "stream", io.MultiReader(strings.NewReader(big)), -1, PutOptions{})
		require.NoError(t, err)
		got, info := content(t, s, "stream")
		assert.Equal(t, big, got)
		assert.Equal(t, int64(len(big)), info.Size)
	})
}

func TestStaleRefusedBeforeUpload(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		s := e.store(t, nil, nil)
		_, err := put(t, s, "k", 8, "eight")
		require.NoError(t, err)
		before := e.snapshot(t)

		_, err = put(t, s, "k", 7, "seven")
		se, ok := fence.IsStale(err)
		require.True(t, ok, "got %v", err)
		assert.Equal(t, fence.Token(7), se.Presented)
		assert.Equal(t, fence.Token(8), se.Highest)
		assert.Equal(t, "k", se.Resource)
		assert.Equal(t, before, e.snapshot(t), "a stale put must leave no trace")

		called := false
		err = s.Fence(testCtx(t), "k", 7, func(context.Context) error { called = true; return nil })
		assert.ErrorIs(t, err, fence.ErrStale)
		assert.False(t, called, "write must not run for a stale token")
	})
}

func TestDeleteTombstone(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		s := e.store(t, nil, nil)
		ctx := testCtx(t)
		_, err := put(t, s, "doc", 4, "v4")
		require.NoError(t, err)

		// Stale delete refused, content intact.
		_, err = s.Delete(fence.WithClaim(ctx, fence.ClaimFor(ctx, 3)), "doc")
		se, ok := fence.IsStale(err)
		require.True(t, ok, "got %v", err)
		assert.Equal(t, fence.Token(4), se.Highest)
		got, _ := content(t, s, "doc")
		assert.Equal(t, "v4", got)

		// Newer delete accepted: tombstone, data object removed.
		info, err := s.Delete(fence.WithClaim(ctx, fence.ClaimFor(ctx, 5)), "doc")
		require.NoError(t, err)
		assert.True(t, info.Deleted)
		_, gi, err := s.GetBytes(ctx, "doc")
		var nf *fence.NotFoundError
		require.ErrorAs(t, err, &nf)
		assert.ErrorIs(t, err, fence.ErrNotFound)
		assert.True(t, nf.Deleted)
		assert.Equal(t, fence.Token(5), nf.Token)
		assert.True(t, gi.Deleted)
		assert.Equal(t, []string{"doc"}, e.listAll(t), "only the tombstone pointer remains")

		// The tombstone keeps the mark: a write below it is refused.
		_, err = put(t, s, "doc", 4, "late")
		assert.ErrorIs(t, err, fence.ErrStale)
		tok, err := s.Mark(ctx, "doc")
		require.NoError(t, err)
		assert.Equal(t, fence.Token(5), tok.Token)

		// Writing again at or above the mark revives the key.
		_, err = put(t, s, "doc", 5, "v5")
		require.NoError(t, err)
		got, _ = content(t, s, "doc")
		assert.Equal(t, "v5", got)

		// Deleting a key that never existed writes a tombstone all the same.
		_, err = s.Delete(fence.WithClaim(ctx, fence.ClaimFor(ctx, 2)), "never")
		require.NoError(t, err)
		_, err = put(t, s, "never", 1, "x")
		assert.ErrorIs(t, err, fence.ErrStale)
	})
}

func TestFenceStaging(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		s := e.store(t, nil, nil)
		ctx := testCtx(t)

		// The write sees its token in ctx, and what it stages is invisible
		// until Fence commits.
		err := s.Fence(ctx, "f", 3, func(wctx context.Context) error {
			tok, ok := fence.FromContext(wctx)
			require.True(t, ok)
			assert.Equal(t, fence.Token(3), tok)
			require.NoError(t, Stage(wctx, strings.NewReader("staged"), 6, PutOptions{}))
			assert.ErrorIs(t, Stage(wctx, strings.NewReader("x"), 1, PutOptions{}), fence.ErrAlreadyStaged)
			assert.ErrorIs(t, StageDelete(wctx), fence.ErrAlreadyStaged)
			_, _, err := s.GetBytes(wctx, "f")
			assert.ErrorIs(t, err, fence.ErrNotFound, "staged data must be invisible before the commit")
			return nil
		})
		require.NoError(t, err)
		got, info := content(t, s, "f")
		assert.Equal(t, "staged", got)
		assert.Equal(t, fence.Token(3), info.Token)

		// A failing write: its error comes back, nothing changes, staged data
		// is removed.
		before := e.snapshot(t)
		boom := errors.New("boom")
		err = s.Fence(ctx, "f", 9, func(wctx context.Context) error {
			require.NoError(t, Stage(wctx, strings.NewReader("never"), 5, PutOptions{}))
			return boom
		})
		assert.ErrorIs(t, err, boom)
		assert.Equal(t, before, e.snapshot(t))

		// A write that stages nothing re-stamps the content with its token.
		var leaked context.Context
		require.NoError(t, s.Fence(ctx, "f", 4, func(wctx context.Context) error { leaked = wctx; return nil }))
		got, info = content(t, s, "f")
		assert.Equal(t, "staged", got)
		assert.Equal(t, fence.Token(4), info.Token)
		_, err = put(t, s, "f", 3, "stale")
		assert.ErrorIs(t, err, fence.ErrStale)
		assert.ErrorIs(t, Stage(leaked, strings.NewReader("late"), 4, PutOptions{}), fence.ErrStageClosed)

		// On a key without content it leaves a tombstone carrying the mark.
		require.NoError(t, s.Fence(ctx, "g", 2, func(context.Context) error { return nil }))
		var nf *fence.NotFoundError
		_, _, err = s.GetBytes(ctx, "g")
		require.ErrorAs(t, err, &nf)
		assert.Equal(t, fence.Token(2), nf.Token)

		// A nil write is refused and changes nothing.
		before = e.snapshot(t)
		assert.ErrorIs(t, s.Fence(ctx, "f", 9, nil), fence.ErrNilArgument)
		assert.ErrorIs(t, s.Fence(ctx, "f", 0, nil), fence.ErrInvalidToken)
		assert.Equal(t, before, e.snapshot(t))

		// Stage outside Fence.
		assert.ErrorIs(t, Stage(ctx, strings.NewReader("x"), 1, PutOptions{}), fence.ErrNoStager)
		assert.ErrorIs(t, StageDelete(ctx), fence.ErrNoStager)
	})
}

func TestIfMatchOnMissingPointer(t *testing.T) {
	// The pointer vanishes (removed outside the guard) between the read
	// and the conditional write: If-Match gets 404, the loop re-reads and
	// creates the pointer with If-None-Match: *.
	forEachClient(t, func(t *testing.T, e env) {
		_, err := put(t, e.store(t, nil, nil), "gone", 1, "one")
		require.NoError(t, err)
		ft := &faultyTransport{match: pathIs(e.bucket, "gone")}
		s := e.store(t, e.newClient(t, ft), nil)
		removed := false
		s.afterRead = func(key string) {
			if !removed {
				removed = true
				require.NoError(t, e.raw.RemoveObject(testCtx(t), e.bucket, key, minio.RemoveObjectOptions{}))
			}
		}
		info, err := put(t, s, "gone", 2, "two")
		require.NoError(t, err)
		assert.True(t, removed)
		assert.Equal(t, []int{http.StatusNotFound, http.StatusOK}, ft.seen(), "If-Match got 404, then If-None-Match: * succeeded")
		got, gi := content(t, s, "gone")
		assert.Equal(t, "two", got)
		assert.Equal(t, info.WriteID, gi.WriteID)
	})
}

func TestDataObjectVanishesDuringGet(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		s := e.store(t, nil, nil)

		// Superseded: between the reader's pointer read and its data read, a
		// newer write replaces the content and removes the old data object.
		// Get reads the pointer again and returns the new content.
		_, err := put(t, s, "moving", 1, "old")
		require.NoError(t, err)
		reader := e.store(t, e.newClient(t, nil), nil)
		calls := 0
		var newer Info
		reader.beforeData = func(key string) {
			calls++
			if calls == 1 {
				newer, err = put(t, s, key, 2, "new")
				require.NoError(t, err)
			}
		}
		got, info := content(t, reader, "moving")
		assert.Equal(t, "new", got)
		assert.Equal(t, newer, info)
		assert.Equal(t, 2, calls, "the first data read must have missed and the pointer been read again")

		_, err = put(t, s, "k", 1, "one")
		require.NoError(t, err)

		// Corrupt: the data object is removed outside the guard.
		_, info = content(t, s, "k")
		require.NoError(t, e.raw.RemoveObject(testCtx(t), e.bucket, info.DataKey, minio.RemoveObjectOptions{}))
		_, _, err = s.GetBytes(testCtx(t), "k")
		var de *DataError
		require.ErrorAs(t, err, &de)
		assert.ErrorIs(t, err, ErrCorrupt)

		// Replaced: the data object holds other bytes than the pointer says.
		info, err = put(t, s, "k", 2, "two")
		require.NoError(t, err)
		_, err = e.rawPut(t, info.DataKey, []byte("forged"), minio.PutObjectOptions{})
		require.NoError(t, err)
		_, _, err = s.GetBytes(testCtx(t), "k")
		assert.ErrorIs(t, err, ErrCorrupt)
	})
}

func TestSweep(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		s := e.store(t, nil, func(c *Config) { c.KeepSuperseded = true })
		ctx := testCtx(t)
		i1, err := put(t, s, "k", 1, "one")
		require.NoError(t, err)
		i2, err := put(t, s, "k", 2, "two")
		require.NoError(t, err)
		// A crashed writer holding token 3 staged data but never committed.
		crashed := dataKey(DefaultDataPrefix, "k", 3, newWriteID())
		_, err = e.rawPut(t, crashed, []byte("three"), minio.PutObjectOptions{})
		require.NoError(t, err)
		// A deeper key's data ("k/sub") lives under the same prefix and is not
		// touched. (Only its data object: MinIO does not list both "k" and
		// "k/sub" as objects, with or without the guard.)
		deeper := dataKey(DefaultDataPrefix, "k/sub", 1, newWriteID())
		_, err = e.rawPut(t, deeper, []byte("sub"), minio.PutObjectOptions{})
		require.NoError(t, err)
		assert.ElementsMatch(t, []string{"k", i1.DataKey, i2.DataKey, crashed, deeper}, e.listAll(t))

		n, err := s.Sweep(ctx, "k")
		require.NoError(t, err)
		assert.Equal(t, 1, n, "only token 1's superseded data is provably dead")
		assert.ElementsMatch(t, []string{"k", i2.DataKey, crashed, deeper}, e.listAll(t))

		i4, err := put(t, s, "k", 4, "four")
		require.NoError(t, err)
		n, err = s.Sweep(ctx, "k")
		require.NoError(t, err)
		assert.Equal(t, 2, n)
		assert.ElementsMatch(t, []string{"k", i4.DataKey, deeper}, e.listAll(t))
		got, _ := content(t, s, "k")
		assert.Equal(t, "four", got)
	})
}

// TestStatAndStageBytes: Stat reports what the pointer records without
// reading the content, and a tombstone as not found with its Info;
// StageBytes stages content held in memory for Fence.
func TestStatAndStageBytes(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		s := e.store(t, nil, nil)
		ctx := testCtx(t)
		err := s.Fence(ctx, "k", 1, func(ctx context.Context) error {
			return StageBytes(ctx, []byte("one"), PutOptions{ContentType: "text/plain"})
		})
		require.NoError(t, err)
		got, _ := content(t, s, "k")
		assert.Equal(t, "one", got)
		_, want, err := s.GetBytes(ctx, "k")
		require.NoError(t, err)
		info, err := s.Stat(ctx, "k")
		require.NoError(t, err)
		assert.Equal(t, want, info)
		assert.Equal(t, fence.Token(1), info.Token)
		assert.Equal(t, int64(3), info.Size)

		_, err = s.Delete(fence.WithClaim(ctx, fence.ClaimFor(ctx, 2)), "k")
		require.NoError(t, err)
		info, err = s.Stat(ctx, "k")
		var nf *fence.NotFoundError
		require.ErrorAs(t, err, &nf)
		assert.True(t, nf.Deleted)
		assert.Equal(t, fence.Token(2), nf.Token)
		assert.True(t, info.Deleted)
		assert.Equal(t, fence.Token(2), info.Token)
	})
}

// TestFenceStageGeneric: fence.Stage and fence.StageDelete, called by
// code that knows only fence.Guard, stage into the running callback as
// StageBytes (zero PutOptions) and StageDelete do, inline or as a data
// object; nested calls stage into their own callbacks; a memguard
// callback inside has nothing to stage into.
func TestFenceStageGeneric(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		for _, inline := range []int{0, 64} {
			s := e.store(t, nil, func(c *Config) { c.InlineMax = inline })
			var g fence.Guard = s
			ctx := testCtx(t)
			key := fmt.Sprintf("generic-%d", inline)
			require.NoError(t, s.Fence(ctx, key+"-bytes", 1, func(ctx context.Context) error {
				return StageBytes(ctx, []byte("generic"), PutOptions{})
			}))
			_, want, err := s.GetBytes(ctx, key+"-bytes")
			require.NoError(t, err)

			var leaked context.Context
			mem, err := memguard.New(memguard.Config{})
			require.NoError(t, err)
			require.NoError(t, g.Fence(ctx, key, 3, func(octx context.Context) error {
				leaked = octx
				require.NoError(t, g.Fence(octx, key+"-inner", 5, func(ictx context.Context) error {
					return fence.Stage(ictx, []byte("inner"))
				}))
				require.NoError(t, mem.Fence(octx, key, 1, func(mctx context.Context) error {
					assert.ErrorIs(t, fence.Stage(mctx, []byte("m")), fence.ErrNoStager)
					assert.ErrorIs(t, fence.StageDelete(mctx), fence.ErrNoStager)
					return nil
				}))
				require.NoError(t, fence.Stage(octx, []byte("generic")))
				assert.ErrorIs(t, fence.Stage(octx, []byte("again")), fence.ErrAlreadyStaged)
				assert.ErrorIs(t, fence.StageDelete(octx), fence.ErrAlreadyStaged)
				return nil
			}))
			assert.ErrorIs(t, fence.Stage(leaked, []byte("late")), fence.ErrStageClosed)
			b, got, err := s.GetBytes(ctx, key)
			require.NoError(t, err)
			assert.Equal(t, "generic", string(b))
			assert.Equal(t, fence.Token(3), got.Token)
			assert.Equal(t, inline > 0, got.Inline)
			assert.Equal(t, want.Inline, got.Inline)
			assert.Equal(t, want.DataKey == "", got.DataKey == "")
			assert.Equal(t, want.Size, got.Size)
			assert.Equal(t, want.ContentType, got.ContentType)
			assert.Equal(t, want.Metadata, got.Metadata)
			inner, _ := content(t, s, key+"-inner")
			assert.Equal(t, "inner", inner)

			require.NoError(t, g.Fence(ctx, key, 4, fence.StageDelete))
			var nf *fence.NotFoundError
			_, _, err = s.GetBytes(ctx, key)
			require.ErrorAs(t, err, &nf)
			assert.True(t, nf.Deleted)
			assert.Equal(t, fence.Token(4), nf.Token)
		}
	})
}
