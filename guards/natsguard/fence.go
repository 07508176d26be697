package natsguard

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/fencekit/fencekit/fence"
)

// ErrNoStager is returned by Stage and StageDelete when ctx does not come
// from a running Fence write callback.
var ErrNoStager = errors.New("natsguard: Stage called outside a Fence write")

// ErrAlreadyStaged is returned by Stage and StageDelete when the current
// Fence write has already staged a change.
var ErrAlreadyStaged = errors.New("natsguard: this write has already staged a change")

// ErrStageClosed is returned by Stage and StageDelete when the Fence call
// whose context they were given has returned.
var ErrStageClosed = errors.New("natsguard: the Fence call of this context has returned")

// ErrNilWrite is returned by Fence when its write callback is nil.
var ErrNilWrite = errors.New("natsguard: Fence with a nil write")

type stageKey struct{}

type stage struct {
	mu     sync.Mutex
	op     op
	value  []byte
	closed bool
}

func (s *stage) set(o op, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return ErrStageClosed
	case s.op != opMark:
		return ErrAlreadyStaged
	}
	s.op, s.value = o, value
	return nil
}

// Stage records value as the new value of the resource a running Fence
// call guards; Fence writes it once the callback returns nil.
func Stage(ctx context.Context, value []byte) error {
	s, ok := ctx.Value(stageKey{}).(*stage)
	if !ok {
		return ErrNoStager
	}
	return s.set(opValue, value)
}

// StageDelete records a tombstone for the resource.
func StageDelete(ctx context.Context) error {
	s, ok := ctx.Value(stageKey{}).(*stage)
	if !ok {
		return ErrNoStager
	}
	return s.set(opDelete, nil)
}

var _ fence.Guard = (*Guard)(nil)

// Fence implements fence.Guard: it reads resource's mark and, if token is
// admitted (with the run ctx carries for that token, fence.ClaimFor), runs
// write, which states the new value with Stage or StageDelete; when write
// returns nil the staged change is written as PutClaim writes it, deciding
// again. A write that staged nothing raises the mark alone (the value is
// kept). If write fails nothing is written. Effects of write outside the
// bucket are not fenced.
func (g *Guard) Fence(ctx context.Context, resource string, token fence.Token, write func(ctx context.Context) error) error {
	if ctx == nil {
		return nilContext(resource)
	}
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
	st := &stage{op: opMark}
	werr := write(context.WithValue(ctx, stageKey{}, st))
	st.mu.Lock()
	st.closed = true
	o, value := st.op, st.value
	st.mu.Unlock()
	if werr != nil {
		return fence.WrapContext(ctx, werr)
	}
	if err := fence.ContextError(ctx); err != nil {
		return fmt.Errorf("natsguard: %q: %w", resource, err)
	}
	return g.write(ctx, resource, c, o, value)
}
