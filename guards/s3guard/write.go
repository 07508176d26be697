package s3guard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/s3guard/s3client"
)

// decideWrite is the fenced write path's read and decision (the
// objstage.Writer's Decide). With useCache, a cached pointer stands in for
// the pointer GET (Put and Delete: their write only stages).
func (s *Guard) decideWrite(ctx context.Context, key string, c fence.Claim, useCache bool) (current, error) {
	cur, hit := current{}, false
	if useCache {
		cur, hit = s.cache.get(key)
	}
	var derr error
	if hit {
		derr = s.decide(key, c, cur)
	}
	if !hit || (derr != nil && cur.cached) {
		// No cache entry, or a refusal decided on one: refusing on the cache
		// alone would be safe (a mark only rises, so the real one is at
		// least the cached one), but the real mark may be higher
		// (StaleError.Highest) or have been erased outside the guard:
		// confirm with a read. Only refusals pay for it.
		cur, _, derr = s.readDecide(ctx, key, c, "")
	}
	return cur, derr
}

// discard removes the data object ch staged, after the write callback
// failed (the objstage.Writer's Discard).
func (s *Guard) discard(ctx context.Context, ch change) {
	if ch.data != nil && ch.data.key != "" {
		s.remove(ctx, ch.data.key)
	}
}

// decide is the fenced write path's decision on the pointer state cur (read
// or taken from the cache): the test hook afterRead runs first.
func (s *Guard) decide(key string, c fence.Claim, cur current) error {
	if s.afterRead != nil {
		s.afterRead(key)
	}
	return fence.DecideClaim(key, c, cur.token(), cur.run())
}

// readDecide reads the pointer of key afresh and decides c against it.
// When writeID is set and the pointer carries it, an earlier attempt of this
// write landed: landed is true and nothing is decided.
func (s *Guard) readDecide(ctx context.Context, key string, c fence.Claim, writeID string) (cur current, landed bool, err error) {
	if cur, err = s.readPointer(ctx, key); err != nil {
		return current{}, false, err
	}
	if writeID != "" && cur.p != nil && cur.p.WriteID == writeID {
		return cur, true, nil
	}
	return cur, false, s.decide(key, c, cur)
}

// next builds the pointer that commits ch over cur under claim c: its mark
// is fence.NextMark's.
func (ch change) next(c fence.Claim, writeID string, cur current) *pointer {
	tok, run := fence.NextMark(c, cur.token(), cur.run())
	p := &pointer{Format: PointerFormat, Token: tok, Run: run, WriteID: writeID}
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
func (s *Guard) commit(ctx context.Context, key string, c fence.Claim, writeID string, ch change, cur current) (Info, error) {
	var conflicts, lost int
	for {
		if ch.keeps() && cur.partial {
			// A cache entry lacks the inline content and metadata that
			// re-stamping copies: read the full pointer. Nothing is staged.
			var err error
			if cur, _, err = s.readDecide(ctx, key, c, ""); err != nil {
				return Info{}, err
			}
		}
		next := ch.next(c, writeID, cur)
		body, err := next.encode()
		if err != nil {
			return Info{}, fmt.Errorf("s3guard: encode pointer: %w", err)
		}
		opts := s3client.PutOptions{
			ContentType: PointerContentType,
			Metadata:    writeMetadata(next.Token, next.Run, writeID),
			IfMatch:     cur.etag,
			IfNoneMatch: cur.p == nil,
		}
		if err := fence.ContextError(ctx); err != nil {
			// Not sent: nothing was written. The staged data goes.
			s.dropUnreferenced(ctx, ch, cur)
			return Info{}, fmt.Errorf("s3guard: write pointer %q: not sent: %w", key, err)
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
			// Sent, and no answer came back (the SDK gave up, or ctx ended
			// while it waited): the pointer may have landed, or may still
			// land. Settle it with a read that survives ctx: our write id
			// means it landed, and the write is reported as done (even if
			// ctx has ended: it was written, before any newer token's
			// write). Anything else leaves the outcome unknown, because
			// the request may still be applied, or was applied and then
			// superseded. Never remove the staged data here.
			s.cache.drop(key)
			got, rerr := s.settleRead(ctx, key)
			if rerr == nil && got.p != nil && got.p.WriteID == writeID {
				s.dropSuperseded(ctx, cur, got.p)
				return s.info(key, got.p), nil
			}
			if rerr == nil && got.token() > c.Token && got.etag != cur.etag {
				// A newer holder's pointer replaced the one our request was
				// conditional on, so it can no longer land; it may have
				// landed before and been overwritten.
				return Info{}, fence.WrapContext(ctx, overtaken(key, c, got))
			}
			return Info{}, fence.OutcomeUnknown(ctx, "s3guard: write pointer", key, fmt.Errorf("write id %s: %w", writeID, err))
		}
		prev := cur
		var landed bool
		if fence.ContextError(ctx) != nil {
			// The 412 (or 404) may answer the SDK's retry of an attempt
			// of ours that landed; ctx can no longer read, a bounded
			// read of its own can.
			got, rerr := s.settleRead(ctx, key)
			if rerr == nil && got.p != nil && got.p.WriteID == writeID {
				s.dropSuperseded(ctx, prev, got.p)
				return s.info(key, got.p), nil
			}
			if rerr == nil {
				s.dropUnreferenced(ctx, ch, got)
			}
			return Info{}, fmt.Errorf("s3guard: write pointer %q: precondition failed: %w", key, fence.ContextError(ctx))
		}
		cur, landed, err = s.readDecide(ctx, key, c, writeID)
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
// replaced, unless new still refers to it or the Guard keeps them.
func (s *Guard) dropSuperseded(ctx context.Context, old current, new *pointer) {
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
func (s *Guard) dropUnreferenced(ctx context.Context, ch change, cur current) {
	if ch.data == nil || ch.data.key == "" || (cur.p != nil && cur.p.Data == ch.data.key) {
		return
	}
	s.remove(ctx, ch.data.key)
}

// settleRead reads the pointer of key with a context of its own, bounded
// by settleTimeout, that keeps ctx's values but not its end: it settles the
// outcome of a pointer write sent without a reply.
func (s *Guard) settleRead(ctx context.Context, key string) (current, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	return s.readPointer(ctx, key)
}

// remove deletes a data object, best effort, with its own short timeout
// that survives the caller's cancellation.
func (s *Guard) remove(ctx context.Context, dataKey string) {
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

// overtaken is the refusal of a write under c whose pointer PUT was sent
// without a conclusive answer and which the settling read found replaced by
// a newer holder's pointer got: it may have landed before being overwritten.
func overtaken(key string, c fence.Claim, got current) error {
	return &fence.StaleError{Resource: key, Presented: c.Token, Highest: got.token(), Overtaken: true}
}
