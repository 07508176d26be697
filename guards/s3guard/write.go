package s3guard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/internal/engine"
	"github.com/fencekit/fencekit/guards/s3guard/s3client"
)

// write is every fenced write: the claim ctx carries (c nil) or *c,
// checked (engine.Args), then the engine's run of write over a call of its
// own. read is engine.ReadAny for Put and Delete (the pointer cache may
// stand in for the pointer GET) and engine.ReadFresh for Fence and Do.
func (s *Guard) write(ctx context.Context, resource string, c *fence.Claim, read engine.Read, write func(ctx context.Context) error) (info Info, err error) {
	err = s.eng.Claimed(ctx, resource, c, func(c fence.Claim) error {
		w := &call{s: s, key: resource}
		err := s.eng.With(w).Run(ctx, resource, c, read, write)
		info = w.info
		return w.finish(ctx, err)
	})
	return info, engine.ContextErr(ctx, "s3guard", err)
}

// call is one fenced write's engine.Driver, and each of its attempts: the
// pointer its attempts decide on and what they committed or staged.
type call struct {
	s   *Guard
	key string
	// cur is the pointer the attempt decides on (read, or taken from
	// the cache), or the last one read; fresh says the last lost race
	// read it just now, so the next attempt need not read again.
	cur   current
	fresh bool
	// conflicts counts the 409s: the n-th waits n × ConflictBackoff.
	conflicts int
	// staged is the data object the callback staged, if any; keep says it
	// may be referenced by a pointer in flight and must stay.
	staged *staged
	keep   bool
	info   Info // what was committed
}

// Open returns the attempt on the pointer of key: the one the last lost
// race read, the cached one (engine.ReadAny), or one read now.
func (w *call) Open(ctx context.Context, key string, read engine.Read) (engine.Attempt, error) {
	if w.fresh {
		w.fresh = false
		return w, nil
	}
	s, hit := w.s, false
	if read == engine.ReadAny {
		w.cur, hit = s.cache.get(key)
	}
	if !hit {
		cur, err := s.readPointer(ctx, key)
		if err != nil {
			return nil, err
		}
		w.cur = cur
	}
	s.hook(key)
	return w, nil
}

// Mark returns the pointer's mark; cached when it came from the cache.
func (w *call) Mark() (fence.Claim, bool, bool) {
	return fence.Claim{Token: w.cur.token(), Run: w.cur.run()}, true, w.cur.cached
}

// Close does nothing: an attempt holds nothing.
func (w *call) Close() {}

// Commit PUTs the pointer that commits ch over cur under c, with
// If-Match on cur's ETag (If-None-Match: * without a pointer).
func (w *call) Commit(ctx context.Context, c fence.Claim, ch engine.Change, id string) (engine.Result, error) {
	s, key := w.s, w.key
	if ch.Op == engine.OpMark && w.cur.partial {
		// A cache entry lacks the inline content and metadata that
		// re-stamping copies: read the full pointer and decide on it.
		cur, err := s.readPointer(ctx, key)
		if err != nil {
			return engine.Failed, err
		}
		w.cur = cur
		s.hook(key)
		if err := fence.DecideClaim(key, c, cur.token(), cur.run()); err != nil {
			return engine.Failed, err
		}
	}
	next := nextPointer(ch, c, id, w.cur)
	body, err := next.encode()
	if err != nil {
		return engine.Failed, fmt.Errorf("s3guard: encode pointer: %w", err)
	}
	ui, err := s.client.Put(ctx, s.bucket, key, bytes.NewReader(body), int64(len(body)), s3client.PutOptions{
		ContentType: PointerContentType,
		Metadata:    writeMetadata(next.Token, next.Run, id),
		IfMatch:     w.cur.etag,
		IfNoneMatch: w.cur.p == nil,
	})
	switch {
	case err == nil:
		s.cache.put(key, current{p: next, etag: ui.ETag})
		w.landed(ctx, next)
		return engine.Committed, nil
	case errors.Is(err, s3client.ErrConflict):
		// AWS: a concurrent conditional write is in progress.
		w.conflicts++
		if err := wait(ctx, time.Duration(w.conflicts)*s.backoff); err != nil {
			return engine.Failed, fmt.Errorf("s3guard: write pointer %q: %w", key, fence.ContextError(ctx))
		}
		return w.raced(ctx, c, id)
	case errors.Is(err, s3client.ErrPreconditionFailed), errors.Is(err, s3client.ErrNotFound):
		// Someone else's write (404: If-Match on a pointer removed
		// meanwhile), or our own whose reply was lost and that the SDK
		// sent again: the re-read tells.
		return w.raced(ctx, c, id)
	}
	// Sent, and no answer came back (the SDK gave up, or ctx ended while
	// it waited): the pointer may have landed, or may still land. Settle
	// decides; the staged data stays either way.
	w.keep = true
	return engine.Lost, err
}

// raced reads the pointer after a conditional PUT that found another one:
// our write id means the SDK's retry met our own write (Committed);
// otherwise c is decided on what was read: a refusal ends the call, an
// admission is a lost race (Conflict), and the next attempt starts from
// that read. Once ctx has ended, the read has a context of its own and
// anything but ours ends the call.
func (w *call) raced(ctx context.Context, c fence.Claim, id string) (engine.Result, error) {
	s, key := w.s, w.key
	if cerr := fence.ContextError(ctx); cerr != nil {
		got, rerr := s.settleRead(ctx, key)
		if rerr == nil && got.p != nil && got.p.WriteID == id {
			w.landed(ctx, got.p)
			return engine.Committed, nil
		}
		if rerr == nil {
			w.cur = got
		} else {
			w.keep = true
		}
		return engine.Failed, fmt.Errorf("s3guard: write pointer %q: precondition failed: %w", key, cerr)
	}
	cur, err := s.readPointer(ctx, key)
	if err != nil {
		w.keep = true
		return engine.Failed, err
	}
	if cur.p != nil && cur.p.WriteID == id {
		w.landed(ctx, cur.p)
		return engine.Committed, nil
	}
	s.hook(key)
	w.cur, w.fresh = cur, true
	if err := fence.DecideClaim(key, c, cur.token(), cur.run()); err != nil {
		return engine.Failed, err
	}
	return engine.Conflict, nil
}

// Settle reads the pointer of a PUT whose reply was lost, with a context
// of its own that survives ctx: our write id means it landed (reported as
// done even if ctx has ended: it was written before any newer token's
// write); a newer holder's pointer replacing the one the PUT was
// conditional on means it can no longer land, though it may have before
// (a stale refusal marked Overtaken); anything else leaves the outcome
// unknown.
func (w *call) Settle(ctx context.Context, c fence.Claim, _ engine.Change, id string, lost error) (engine.Result, error) {
	s, key := w.s, w.key
	got, rerr := s.settleRead(ctx, key) // refreshes the cache, or drops the key
	switch {
	case rerr == nil && got.p != nil && got.p.WriteID == id:
		w.landed(ctx, got.p)
		return engine.Committed, nil
	case rerr == nil && got.token() > c.Token && got.etag != w.cur.etag:
		return engine.Failed, fence.WrapContext(ctx, overtaken(key, c, got))
	}
	return engine.Failed, fence.OutcomeUnknown(ctx, "s3guard: write pointer", key, fmt.Errorf("write id %s: %w", id, lost))
}

// landed records p, the pointer this call wrote, as its outcome and
// removes the data object of the pointer it replaced.
func (w *call) landed(ctx context.Context, p *pointer) {
	w.s.dropSuperseded(ctx, w.cur, p)
	w.info = w.s.info(w.key, p)
}

// finish removes the data the call staged when the call failed, unless
// it may be referenced: by a pointer in flight (keep), or by the current
// pointer (an earlier attempt of ours landed, its reply was lost, and a
// content-keeping write copied the reference; once the current pointer
// does not refer to a data object, no later pointer can: references are
// only copied from the current pointer).
func (w *call) finish(ctx context.Context, err error) error {
	d := w.staged
	if err != nil && !w.keep && d != nil && d.key != "" && (w.cur.p == nil || w.cur.p.Data != d.key) {
		w.s.remove(ctx, d.key)
	}
	return err
}

// nextPointer builds the pointer that commits ch over cur under claim c
// and write id: its mark is fence.NextMark's.
func nextPointer(ch engine.Change, c fence.Claim, id string, cur current) *pointer {
	tok, run := fence.NextMark(c, cur.token(), cur.run())
	p := &pointer{Format: PointerFormat, Token: tok, Run: run, WriteID: id}
	switch {
	case ch.Op == engine.OpPut:
		d := ch.Content.(*staged)
		p.Data, p.ETag, p.Size, p.ContentType, p.Metadata = d.key, d.etag, d.size, d.opts.ContentType, d.opts.Metadata
		p.Inline = d.inline
	case ch.Op == engine.OpDelete || cur.p == nil || cur.p.Deleted:
		p.Deleted = true
	default: // nothing staged: keep the current content
		c := cur.p
		p.Data, p.ETag, p.Size, p.ContentType, p.Metadata = c.Data, c.ETag, c.Size, c.ContentType, c.Metadata
		p.Inline = c.Inline
	}
	return p
}

// hook runs the test hook afterRead, when set: after every pointer read or
// cache hit of the fenced write path, before the decision.
func (s *Guard) hook(key string) {
	if s.afterRead != nil {
		s.afterRead(key)
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
