package redisguard

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/fencekit/fencekit/fence"
)

// ErrNoStager is returned by Stage and StageDelete when ctx does not come
// from a running Fence write callback.
var ErrNoStager = errors.New("redisguard: Stage called outside a Fence write")

// ErrAlreadyStaged is returned by Stage and StageDelete when the current
// Fence write has already staged a change.
var ErrAlreadyStaged = errors.New("redisguard: this write has already staged a change")

// ErrStageClosed is returned by Stage and StageDelete when the Fence call
// whose context they were given has returned.
var ErrStageClosed = errors.New("redisguard: the Fence call of this context has returned")

// ErrNilWrite is returned by Fence when its write callback is nil.
var ErrNilWrite = errors.New("redisguard: Fence with a nil write")

type stageKey struct{}

// stage is what one Fence write callback staged.
type stage struct {
	mu     sync.Mutex
	op     string // "m" (nothing staged), "p" or "d"
	value  []byte
	closed bool
}

func (s *stage) set(op string, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return ErrStageClosed
	case s.op != "m":
		return ErrAlreadyStaged
	}
	s.op, s.value = op, value
	return nil
}

// Stage records value as the new value of the resource a running Fence
// call guards; Fence writes it, with the mark, once the callback returns
// nil. ctx must be (derived from) the callback's context.
func Stage(ctx context.Context, value []byte) error {
	s, ok := ctx.Value(stageKey{}).(*stage)
	if !ok {
		return ErrNoStager
	}
	return s.set("p", value)
}

// StageDelete records the deletion of the resource's value (its mark stays).
func StageDelete(ctx context.Context) error {
	s, ok := ctx.Value(stageKey{}).(*stage)
	if !ok {
		return ErrNoStager
	}
	return s.set("d", nil)
}

var _ fence.Guard = (*Guard)(nil)

// Fence implements fence.Guard for code written against that interface
// (httpguard's middleware, for one). It reads resource's mark and, if
// token is admitted (with the run ctx carries for that token,
// fence.ClaimFor), runs write; write states the new value with Stage (or
// StageDelete) on its ctx. When write returns nil, the staged change is
// written with the mark in one script that decides again, so a write
// admitted by the first read but overtaken meanwhile is refused as stale.
// A write that staged nothing raises the mark only. If write fails nothing
// is written. Effects of write outside Redis are not fenced.
func (g *Guard) Fence(ctx context.Context, resource string, token fence.Token, write func(ctx context.Context) error) error {
	c := fence.ClaimFor(ctx, token)
	if err := g.args(ctx, resource, c); err != nil {
		return err
	}
	return g.fence(ctx, resource, c, write)
}

// Do is Fence under the claim ctx carries (fence.ClaimFromContext; none:
// fence.ErrNoToken, write not called).
func (g *Guard) Do(ctx context.Context, resource string, write func(ctx context.Context) error) error {
	c, err := g.ctxClaim(ctx, resource)
	if err != nil {
		return err
	}
	return g.fence(ctx, resource, c, write)
}

func (g *Guard) fence(ctx context.Context, resource string, c fence.Claim, write func(ctx context.Context) error) error {
	if write == nil {
		return ErrNilWrite
	}
	m, err := g.Mark(ctx, resource)
	if err != nil {
		return err
	}
	if err := fence.DecideClaim(resource, c, m.Token, m.Run); err != nil {
		g.rec.Decision(ctx, err)
		g.rec.Refused(ctx, resource, c, err)
		return err
	}
	st := &stage{op: "m"}
	werr := write(context.WithValue(ctx, stageKey{}, st))
	st.mu.Lock()
	st.closed = true
	op, value := st.op, st.value
	st.mu.Unlock()
	if werr != nil {
		return fence.WrapContext(ctx, werr)
	}
	if err := fence.ContextError(ctx); err != nil {
		return fmt.Errorf("redisguard: %q: %w", resource, err)
	}
	return g.write(ctx, resource, c, op, value)
}
