//go:build unix

package fileguard

import (
	"context"
	"errors"
	"sync"

	"github.com/fencekit/fencekit/fence"
)

// ErrNoStager is returned by Stage and StageDelete when ctx does not come
// from a running Fence write callback.
var ErrNoStager = errors.New("fileguard: Stage called outside a Fence write")

// ErrAlreadyStaged is returned by Stage and StageDelete when the current
// Fence write has already staged a change.
var ErrAlreadyStaged = errors.New("fileguard: this write has already staged a change")

// ErrStageClosed is returned by Stage and StageDelete when the Fence call
// whose context they were given has returned.
var ErrStageClosed = errors.New("fileguard: the Fence call of this context has returned")

// ErrNilWrite is returned by Fence when its write callback is nil.
var ErrNilWrite = errors.New("fileguard: Fence with a nil write")

type stageKey struct{}

type stage struct {
	mu     sync.Mutex
	kind   kind
	value  []byte
	closed bool
}

func (s *stage) set(k kind, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return ErrStageClosed
	case s.kind != kindNone:
		return ErrAlreadyStaged
	}
	s.kind, s.value = k, value
	return nil
}

// Stage records value as the new content of the resource a running Fence
// call guards; Fence writes it once the callback returns nil. ctx must be
// (derived from) the callback's context.
func Stage(ctx context.Context, value []byte) error {
	if ctx == nil {
		return ErrNoStager
	}
	s, ok := ctx.Value(stageKey{}).(*stage)
	if !ok {
		return ErrNoStager
	}
	return s.set(kindValue, value)
}

// StageDelete records the deletion (a tombstone) of the resource.
func StageDelete(ctx context.Context) error {
	if ctx == nil {
		return ErrNoStager
	}
	s, ok := ctx.Value(stageKey{}).(*stage)
	if !ok {
		return ErrNoStager
	}
	return s.set(kindDeleted, nil)
}

var _ fence.Guard = (*Guard)(nil)

// Fence implements fence.Guard: under resource's lock it reads the mark
// and, if token is admitted (with the run ctx carries for that token,
// fence.ClaimFor), runs write, which states the new content with Stage or
// StageDelete; when write returns nil the staged content is written as
// PutClaim writes it, still under the lock. A write that staged nothing
// raises the mark alone (the content is kept). If write fails, nothing is
// written. Effects of write outside the file are not fenced.
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
	return g.write(ctx, resource, c, func(ctx context.Context) (kind, []byte, error) {
		st := &stage{}
		err := write(context.WithValue(ctx, stageKey{}, st))
		st.mu.Lock()
		defer st.mu.Unlock()
		st.closed = true
		return st.kind, st.value, err
	})
}
