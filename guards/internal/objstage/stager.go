package objstage

import (
	"context"
	"io"
	"sync"

	"github.com/fencekit/fencekit/fence"
)

// Errors holds a guard's own values for the errors objstage returns, so
// that they keep the guard's names and messages.
type Errors struct {
	// NoStager: Stage called with a context that no Fence callback of this
	// guard received.
	NoStager error
	// AlreadyStaged: the callback has already staged its change.
	AlreadyStaged error
	// Closed: the Fence call of the context has returned.
	Closed error
	// NilWrite: Fence or Do with a nil callback.
	NilWrite error
	// NilContext returns the error of a call on resource given a nil
	// context.
	NilContext func(resource string) error
	// Prefix starts messages objstage writes itself ("s3guard").
	Prefix string
}

type stagerKey struct{}

// Stager collects the one change C that a Fence write callback stages for
// the write of Resource under Claim, identified by WriteID, run by Owner
// (the Writer's Owner: the guard).
type Stager[C any] struct {
	Resource string
	Claim    fence.Claim
	WriteID  string
	Owner    any

	errs   *Errors
	mu     sync.Mutex
	closed bool
	staged bool
	ch     C
}

// From returns the Stager of type C that ctx carries, or errs.NoStager.
func From[C any](ctx context.Context, errs *Errors) (*Stager[C], error) {
	if ctx == nil {
		return nil, errs.NoStager
	}
	st, ok := ctx.Value(stagerKey{}).(*Stager[C])
	if !ok {
		return nil, errs.NoStager
	}
	return st, nil
}

// Stage runs build and stages the change it returns. build runs under the
// stager's lock, so a callback's concurrent Stage calls are serialised; it
// runs only when nothing was staged and the Fence call has not returned
// (otherwise errs.AlreadyStaged or errs.Closed). An error of build stages
// nothing and is returned as it is.
func (st *Stager[C]) Stage(build func() (C, error)) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case st.closed:
		return st.errs.Closed
	case st.staged:
		return st.errs.AlreadyStaged
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
func StageContent[C any](ctx context.Context, errs *Errors, optsErr error, r io.Reader, size int64, invalid error,
	build func(st *Stager[C]) (C, error)) error {
	st, err := From[C](ctx, errs)
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
func StageValue[C any](ctx context.Context, errs *Errors, ch C) error {
	st, err := From[C](ctx, errs)
	if err != nil {
		return err
	}
	return st.Stage(func() (C, error) { return ch, nil })
}
