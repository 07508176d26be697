package gcsguard

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
)

type stagerKey struct{}

// stager collects the change a Fence write callback stages.
type stager struct {
	resource string
	mu       sync.Mutex
	ch       *change
	closed   bool
}

func (st *stager) stage(ch *change) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case st.closed:
		return ErrStageClosed
	case st.ch != nil:
		return ErrAlreadyStaged
	}
	st.ch = ch
	return nil
}

// close ends staging and returns the staged change (a re-stamp of the
// current content when nothing was staged).
func (st *stager) close() *change {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.closed = true
	if st.ch == nil {
		return &change{}
	}
	return st.ch
}

func stagerFrom(ctx context.Context) (*stager, error) {
	if ctx == nil {
		return nil, ErrNoStager
	}
	st, ok := ctx.Value(stagerKey{}).(*stager)
	if !ok {
		return nil, ErrNoStager
	}
	return st, nil
}

// Stage provides the size bytes of r (size -1: unknown length) as the
// content that the running Guard.Fence call commits: ctx must be the
// context Fence handed its write callback. The content of r is read into
// memory now (nothing is sent until the callback returns nil); opts and
// size are checked like Put's (content of another length than a known size
// is a *SizeError, and nothing is staged). One callback stages at most one
// change.
func Stage(ctx context.Context, r io.Reader, size int64, opts PutOptions) error {
	st, err := stagerFrom(ctx)
	if err != nil {
		return err
	}
	if err := checkOptions(opts); err != nil {
		return err
	}
	if size < -1 {
		return fmt.Errorf("%w: size %d (want -1 for unknown, or at least 0)", ErrInvalidOptions, size)
	}
	if r == nil {
		return fmt.Errorf("%w: nil reader", ErrInvalidOptions)
	}
	b, err := readSized(st.resource, r, size)
	if err != nil {
		return err
	}
	return st.stage(&change{body: &body{buf: b}, opts: opts})
}

// StageBytes is Stage for content held in memory.
func StageBytes(ctx context.Context, b []byte, opts PutOptions) error {
	return Stage(ctx, bytes.NewReader(b), int64(len(b)), opts)
}

// StageDelete stages a tombstone (see Guard.Delete) for the running
// Guard.Fence call.
func StageDelete(ctx context.Context) error {
	st, err := stagerFrom(ctx)
	if err != nil {
		return err
	}
	return st.stage(&change{deleted: true})
}
