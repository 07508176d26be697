package s3guard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/s3guard/s3client"
)

// PutOptions describe staged content.
type PutOptions struct {
	// ContentType is stored in the pointer and on the data object.
	// At most 256 printable ASCII bytes.
	ContentType string
	// Metadata is stored in the pointer body only (not as x-amz-meta-*
	// headers). Keys: 1..128 of [A-Za-z0-9-_]; values: UTF-8 without
	// control characters; MaxMetadataSize bytes in total.
	Metadata map[string]string
}

// Put stores size bytes from r at key under token. size may be -1 for a
// stream of unknown length (multipart upload). It is Fence with a write
// that calls Stage; on success it returns the new state.
//
// A stale token yields *fence.StaleError and uploads nothing when the
// staleness is visible before the upload; a token that becomes stale while
// the upload runs, or whose staleness the Store's pointer cache did not yet
// know (another Store raised the mark since this one last saw the key),
// yields *fence.StaleError and the upload is removed.
func (s *Store) Put(ctx context.Context, key string, token fence.Token, r io.Reader, size int64, opts PutOptions) (Info, error) {
	if err := checkOptions(opts); err != nil {
		return Info{}, err
	}
	if size < -1 {
		return Info{}, fmt.Errorf("%w: size %d", ErrInvalidOptions, size)
	}
	return s.fence(ctx, key, token, func(ctx context.Context) error {
		return Stage(ctx, r, size, opts)
	}, true)
}

// PutBytes is Put for content held in memory.
func (s *Store) PutBytes(ctx context.Context, key string, token fence.Token, b []byte, opts PutOptions) (Info, error) {
	return s.Put(ctx, key, token, bytes.NewReader(b), int64(len(b)), opts)
}

// Delete stores a tombstone at key under token: a fenced write through the
// same conditional path as Put (never a conditional DeleteObject, which
// MinIO does not honour). Afterwards Get reports *NotFoundError with
// Deleted and Token set, and writes below token are refused. Deleting a key
// that has no content still writes the tombstone, raising the mark.
func (s *Store) Delete(ctx context.Context, key string, token fence.Token) (Info, error) {
	return s.fence(ctx, key, token, StageDelete, true)
}

// Fence implements fence.Guard for the object at key resource.
//
// It reads the pointer (Fence never decides on the pointer cache, since
// write may have effects of its own) and refuses a stale token
// (*fence.StaleError) without calling write. Otherwise it calls write with a
// context that carries token (fence.FromContext) and a stager: write may call Stage to
// upload new content or StageDelete to stage a tombstone. Staged data is
// stored under a fresh data key and stays invisible to Get until the
// conditional pointer write after write returns nil succeeds; that write is
// the commit point. If write stages nothing, the commit re-stamps the
// current content (or a tombstone, if there is none) with token, so the mark
// is raised all the same.
//
// When write fails, its error is returned, the mark is unchanged and staged
// data is removed. A nil write yields ErrNilWrite (after the key and token
// checks) and does nothing.
func (s *Store) Fence(ctx context.Context, resource string, token fence.Token, write func(ctx context.Context) error) error {
	if write == nil {
		if err := checkKey(s.prefix, resource); err != nil {
			return err
		}
		if err := token.Validate(); err != nil {
			return err
		}
		return ErrNilWrite
	}
	_, err := s.fence(ctx, resource, token, write, false)
	return err
}

// fence runs a fenced write. With useCache, a cached pointer stands in for
// the pointer GET (Put and Delete: their write only stages).
func (s *Store) fence(ctx context.Context, key string, token fence.Token, write func(ctx context.Context) error, useCache bool) (_ Info, err error) {
	defer func() { s.met.Decision(ctx, err) }() // counts commits and stale refusals only
	if err := checkKey(s.prefix, key); err != nil {
		return Info{}, err
	}
	if err := token.Validate(); err != nil {
		return Info{}, err
	}
	cur, hit := current{}, false
	if useCache {
		cur, hit = s.cache.get(key)
	}
	var derr error
	if hit {
		derr = s.decide(key, token, cur)
	}
	if !hit || (derr != nil && cur.cached) {
		// No cache entry, or a refusal decided on one: refusing on the cache
		// alone would be safe (a mark only rises, so the real one is at
		// least the cached one), but the real mark may be higher
		// (StaleError.Highest) or have been erased outside the guard:
		// confirm with a read. Only refusals pay for it.
		cur, _, derr = s.readDecide(ctx, key, token, "")
	}
	if derr != nil {
		return Info{}, derr
	}
	st := &stager{s: s, key: key, token: token, writeID: newWriteID()}
	werr := write(context.WithValue(fence.WithToken(ctx, token), stagerKey{}, st))
	ch := st.close()
	if werr != nil {
		if ch.data != nil && ch.data.key != "" {
			s.remove(ctx, ch.data.key)
		}
		return Info{}, werr
	}
	return s.commit(ctx, key, token, st.writeID, ch, cur)
}

// decide is the fenced write path's decision on the pointer state cur (read
// or taken from the cache): the test hook afterRead runs first.
func (s *Store) decide(key string, token fence.Token, cur current) error {
	if s.afterRead != nil {
		s.afterRead(key)
	}
	return fence.Decide(key, token, cur.token())
}

// readDecide reads the pointer of key afresh and decides token against it.
// When writeID is set and the pointer carries it, an earlier attempt of this
// write landed: landed is true and nothing is decided.
func (s *Store) readDecide(ctx context.Context, key string, token fence.Token, writeID string) (cur current, landed bool, err error) {
	if cur, err = s.readPointer(ctx, key); err != nil {
		return current{}, false, err
	}
	if writeID != "" && cur.p != nil && cur.p.WriteID == writeID {
		return cur, true, nil
	}
	return cur, false, s.decide(key, token, cur)
}

// next builds the pointer that commits ch over cur.
func (ch change) next(token fence.Token, writeID string, cur current) *pointer {
	p := &pointer{Format: PointerFormat, Token: token, WriteID: writeID}
	switch {
	case ch.data != nil:
		d := ch.data
		p.Data, p.ETag, p.Size, p.ContentType, p.Metadata = d.key, d.etag, d.size, d.opts.ContentType, d.opts.Metadata
		p.Inline = d.inline
	case ch.deleted || cur.p == nil || cur.p.Deleted:
		p.Deleted = true
	default: // nothing staged: keep the current content
		c := cur.p
		p.Data, p.ETag, p.Size, p.ContentType, p.Metadata = c.Data, c.ETag, c.Size, c.ContentType, c.Metadata
		p.Inline = c.Inline
	}
	return p
}

// keeps reports whether ch re-stamps the current content.
func (ch change) keeps() bool { return ch.data == nil && !ch.deleted }

// commit runs the conditional pointer write loop. cur may come from the
// pointer cache: then a 412 or 404 only means the cache was stale, and that
// first failed write does not count against MaxAttempts.
func (s *Store) commit(ctx context.Context, key string, token fence.Token, writeID string, ch change, cur current) (Info, error) {
	var conflicts, lost int
	for {
		if ch.keeps() && cur.partial {
			// A cache entry lacks the inline content and metadata that
			// re-stamping copies: read the full pointer. Nothing is staged.
			var err error
			if cur, _, err = s.readDecide(ctx, key, token, ""); err != nil {
				return Info{}, err
			}
		}
		next := ch.next(token, writeID, cur)
		body, err := next.encode()
		if err != nil {
			return Info{}, fmt.Errorf("s3guard: encode pointer: %w", err)
		}
		opts := s3client.PutOptions{
			ContentType: PointerContentType,
			Metadata:    writeMetadata(token, writeID),
			IfMatch:     cur.etag,
			IfNoneMatch: cur.p == nil,
		}
		ui, err := s.client.Put(ctx, s.bucket, key, bytes.NewReader(body), int64(len(body)), opts)
		if err == nil {
			s.cache.put(key, current{p: next, etag: ui.ETag})
			s.dropSuperseded(ctx, cur, next)
			return s.info(key, next), nil
		}
		switch {
		case errors.Is(err, s3client.ErrPreconditionFailed):
			// Someone else's write, or our own earlier attempt whose reply
			// was lost and that the SDK retried: the re-read tells.
		case errors.Is(err, s3client.ErrNotFound):
			// If-Match on a pointer that was removed meanwhile.
		case errors.Is(err, s3client.ErrConflict):
			conflicts++
			if err := wait(ctx, time.Duration(conflicts)*s.backoff); err != nil {
				return Info{}, err
			}
		default:
			// Outcome unknown: the pointer may have landed (or still land).
			// Confirm if we can; never remove the staged data here.
			s.cache.drop(key)
			if c, rerr := s.readPointer(ctx, key); rerr == nil && c.p != nil && c.p.WriteID == writeID {
				s.dropSuperseded(ctx, cur, c.p)
				return s.info(key, c.p), nil
			}
			return Info{}, fmt.Errorf("s3guard: write pointer %q (write id %s), outcome unknown: %w", key, writeID, err)
		}
		prev := cur
		var landed bool
		cur, landed, err = s.readDecide(ctx, key, token, writeID)
		switch {
		case landed:
			// Our attempt landed; the reply was lost.
			s.dropSuperseded(ctx, prev, cur.p)
			return s.info(key, cur.p), nil
		case err != nil && cur.p != nil: // refused by the decision on a pointer read
			s.dropUnreferenced(ctx, ch, cur)
			return Info{}, err
		case err != nil:
			return Info{}, err
		}
		if !prev.cached {
			lost++
		}
		if lost >= s.max {
			s.dropUnreferenced(ctx, ch, cur)
			return Info{}, fmt.Errorf("s3guard: %q: %d conditional pointer writes lost races: %w", key, lost, fence.ErrBusy)
		}
		s.met.Retried(ctx, 1)
	}
}

// dropSuperseded removes the data object of the pointer old that new
// replaced, unless new still refers to it or the Store keeps them.
func (s *Store) dropSuperseded(ctx context.Context, old current, new *pointer) {
	if s.keep || old.p == nil || old.p.Data == "" || old.p.Data == new.Data {
		return
	}
	s.remove(ctx, old.p.Data)
}

// dropUnreferenced removes our staged data after a refused or abandoned
// commit, unless the current pointer refers to it (an earlier attempt of
// ours landed, its reply was lost, and a content-keeping write copied the
// reference). Once the current pointer does not refer to a data object, no
// later pointer can: references are only copied from the current pointer.
func (s *Store) dropUnreferenced(ctx context.Context, ch change, cur current) {
	if ch.data == nil || ch.data.key == "" || (cur.p != nil && cur.p.Data == ch.data.key) {
		return
	}
	s.remove(ctx, ch.data.key)
}

// remove deletes a data object, best effort, with its own short timeout
// that survives the caller's cancellation.
func (s *Store) remove(ctx context.Context, dataKey string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_ = s.client.Delete(ctx, s.bucket, dataKey)
}

func wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
