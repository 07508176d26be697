package objstage

import (
	"context"
	"io"
	"sync"

	"github.com/fencekit/fencekit/fence"
)

type stagerKey struct{}

// Stager collects the one change C that a Fence write callback stages for
// the write of Resource under Claim, identified by WriteID, run by Owner
// (the Writer's Owner: the guard).
type Stager[C any] struct {
	Resource string
	Claim    fence.Claim
	WriteID  string
	Owner    any

	mu     sync.Mutex
	closed bool
	staged bool
	ch     C
}

// From returns the Stager of type C that ctx carries, or
// fence.ErrNoStager (ctx nil too).
func From[C any](ctx context.Context) (*Stager[C], error) {
	if ctx == nil {
		return nil, fence.ErrNoStager
	}
	st, ok := ctx.Value(stagerKey{}).(*Stager[C])
	if !ok {
		return nil, fence.ErrNoStager
	}
	return st, nil
}

// Stage runs build and stages the change it returns. build runs under the
// stager's lock, so a callback's concurrent Stage calls are serialised; it
// runs only when nothing was staged and the Fence call has not returned
// (otherwise fence.ErrAlreadyStaged or fence.ErrStageClosed). An error of build stages
// nothing and is returned as it is.
func (st *Stager[C]) Stage(build func() (C, error)) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case st.closed:
		return fence.ErrStageClosed
	case st.staged:
		return fence.ErrAlreadyStaged
	}
	ch, err := build()
	if err != nil {
		return err
	}
	st.ch, st.staged = ch, true
	return nil
}

// close ends staging and returns the staged change (the zero C when
// nothing was staged).
func (st *Stager[C]) close() C {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.closed = true
	return st.ch
}

// StageContent is a guard's Stage of size bytes from r: it finds the Stager
// of type C in ctx, refuses bad options (optsErr, the guard's check of
// them) and a bad size or nil reader (CheckBody with invalid), and stages
// what build makes of the content.
func StageContent[C any](ctx context.Context, optsErr error, r io.Reader, size int64, invalid error,
	build func(st *Stager[C]) (C, error)) error {
	st, err := From[C](ctx)
	if err != nil {
		return err
	}
	if optsErr != nil {
		return optsErr
	}
	if err := CheckBody(r, size, invalid); err != nil {
		return err
	}
	return st.Stage(func() (C, error) { return build(st) })
}

// StageValue stages ch (a tombstone, say) for the Fence call whose
// callback received ctx.
func StageValue[C any](ctx context.Context, ch C) error {
	st, err := From[C](ctx)
	if err != nil {
		return err
	}
	return st.Stage(func() (C, error) { return ch, nil })
}
