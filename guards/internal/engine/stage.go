package engine

import (
	"context"
	"sync"

	"github.com/fencekit/fencekit/fence"
)

// Op is the kind of change a fenced write commits.
type Op byte

// The changes a write commits.
const (
	// OpMark raises the mark alone: a Fence callback that staged nothing.
	// The value is kept; a resource without one keeps none.
	OpMark Op = 'm'
	// OpPut stores Change.Value.
	OpPut Op = 'p'
	// OpDelete removes the value; the mark stays.
	OpDelete Op = 'd'
)

// Change is what a write commits.
type Change struct {
	Op    Op
	Value []byte // OpPut's value
}

// stageKey keys a guard's stager in a callback's context: one key per
// guard name, so a guard's Stage never stages into another guard's
// write.
type stageKey struct{ name string }

// stager holds what one Fence callback staged.
type stager struct {
	mu     sync.Mutex
	ch     Change
	closed bool
}

// Stage records ch as the change of the Fence call of guard name whose
// callback received ctx (or a context derived from it). It returns
// fence.ErrNoStager when there is none (ctx nil too),
// fence.ErrAlreadyStaged when the callback staged a change already, and
// fence.ErrStageClosed when that Fence call has returned.
func Stage(ctx context.Context, name string, ch Change) error {
	if ctx == nil {
		return fence.ErrNoStager
	}
	s, ok := ctx.Value(stageKey{name}).(*stager)
	if !ok {
		return fence.ErrNoStager
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return fence.ErrStageClosed
	case s.ch.Op != OpMark:
		return fence.ErrAlreadyStaged
	}
	s.ch = ch
	return nil
}

// run runs write with a context that carries c and a stager of guard
// name, and returns what write staged (OpMark when nothing) once write
// has returned; later Stage calls on its context fail.
func run(ctx context.Context, name string, c fence.Claim, write func(ctx context.Context) error) (Change, error) {
	s := &stager{ch: Change{Op: OpMark}}
	err := write(context.WithValue(fence.WithClaim(ctx, c), stageKey{name}, s))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return s.ch, err
}
