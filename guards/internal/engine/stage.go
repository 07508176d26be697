package engine

import (
	"context"
	"sync"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/stagectx"
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
	// Content is OpPut's content when the driver stages its own (an
	// object store's staged upload or body) in place of Value; the engine
	// hands it to the driver as it is.
	Content any
}

// stageKey keys a guard's Stager in a callback's context: one key per
// guard name, so an object-store guard's own Stage never stages into
// another guard's write (fence.Stage finds the innermost callback's
// Stager through internal/stagectx instead).
type stageKey struct{ name string }

// BytesFunc builds the change that fence.Stage stages for value in the
// Fence call of st (under st's lock).
type BytesFunc func(ctx context.Context, st *Stager, value []byte) (Change, error)

// Stager holds what one Fence callback staged, and tells a guard's
// staging call which write it stages for. It is the callback's
// stagectx.Stager, through which fence.Stage and fence.StageDelete stage.
type Stager struct {
	// Driver is the driver of the Fence call (Engine.With's, when the
	// guard makes one per call).
	Driver Driver
	// Resource and Claim are the call's.
	Resource string
	Claim    fence.Claim
	// WriteID is the write id of the call's first conditional write (a
	// write that loses its race is sent again under a fresh one): a
	// driver names what it stages after it.
	WriteID string
	// Bytes builds the change of fence.Stage (Engine.Bytes); nil: an
	// OpPut of the value.
	Bytes BytesFunc

	mu     sync.Mutex
	ch     Change
	staged bool
	closed bool
}

// StagerOf returns the Stager of the Fence call of guard name whose
// callback received ctx (or a context derived from it), or
// fence.ErrNoStager when there is none (ctx nil too).
func StagerOf(ctx context.Context, name string) (*Stager, error) {
	if ctx == nil {
		return nil, fence.ErrNoStager
	}
	s, ok := ctx.Value(stageKey{name}).(*Stager)
	if !ok {
		return nil, fence.ErrNoStager
	}
	return s, nil
}

// Stage runs build and stages the change it returns. build runs under the
// Stager's lock, so a callback's concurrent Stage calls are serialised; it
// runs only when nothing was staged and the Fence call has not returned
// (otherwise fence.ErrAlreadyStaged or fence.ErrStageClosed). An error of
// build stages nothing and is returned as it is.
func (s *Stager) Stage(build func() (Change, error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return fence.ErrStageClosed
	case s.staged:
		return fence.ErrAlreadyStaged
	}
	ch, err := build()
	if err != nil {
		return err
	}
	s.ch, s.staged = ch, true
	return nil
}

// StageBytes stages value as fence.Stage does: the change s.Bytes
// builds, or an OpPut of value when s.Bytes is nil.
func (s *Stager) StageBytes(ctx context.Context, value []byte) error {
	return s.Stage(func() (Change, error) {
		if s.Bytes == nil {
			return Change{Op: OpPut, Value: value}, nil
		}
		return s.Bytes(ctx, s, value)
	})
}

// StageDelete stages an OpDelete, as fence.StageDelete does.
func (s *Stager) StageDelete() error {
	return s.Stage(func() (Change, error) { return Change{Op: OpDelete}, nil })
}

// WithoutStager returns ctx without a Stager for fence.Stage: the context
// a guard that does not stage hands its callbacks, so that fence.Stage
// there returns fence.ErrNoStager instead of staging into the callback of
// an enclosing Fence call of another guard.
func WithoutStager(ctx context.Context) context.Context {
	return stagectx.With(ctx, nil)
}

// Stage records ch as the change of the Fence call of guard name whose
// callback received ctx (or a context derived from it): StagerOf, then
// Stager.Stage.
func Stage(ctx context.Context, name string, ch Change) error {
	s, err := StagerOf(ctx, name)
	if err != nil {
		return err
	}
	return s.Stage(func() (Change, error) { return ch, nil })
}

// run runs write with a context that carries s's claim and s (as guard
// name's Stager, and as the Stager of fence.Stage), and returns what write
// staged (OpMark when nothing) once write has returned; later Stage calls
// on its context fail.
func run(ctx context.Context, name string, s *Stager, write func(ctx context.Context) error) (Change, error) {
	err := write(stagectx.With(context.WithValue(fence.WithClaim(ctx, s.Claim), stageKey{name}, s), s))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if !s.staged {
		return Change{Op: OpMark}, err
	}
	return s.ch, err
}
