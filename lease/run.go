package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// Run acquires the lease for key (Acquire: it fails at once when held),
// calls fn and then releases the lease with a fresh context
// (context.WithoutCancel(ctx) bounded by CallTimeout), however fn returned.
// If fn panics (or calls runtime.Goexit), Run cancels fn's context (cause
// ErrReleased) and releases the lease the same way before the panic goes on
// to the caller unchanged, so a caller that recovers it finds the key free.
//
// fn's ctx is a child of ctx: it has ctx's values and deadline, it is
// cancelled when ctx is (cancelling the caller stops the work, and Run
// then releases), and it is also cancelled when the lease is lost, with the
// loss as its cause (context.Cause). It carries the lease's claim
// (fence.ClaimFromContext).
//
// If the lease was lost while fn ran, Run returns an error wrapping the
// loss cause (errors.Is ErrLost, ErrTrustExpired, ErrTakenOver or ErrClosed) even when fn
// returned nil or ctx.Err(); fn's own error is wrapped too. Otherwise it
// returns fn's error, or the release error if only that failed.
//
// When fn parks the lease (Lease.Park succeeded or its outcome was
// unknown: the cause is ErrParked), Run does not release it and returns
// fn's error.
//
// opts apply to the grant (WithHolder).
//
// A nil ctx or fn is refused before anything is sent with an error
// matching fence.ErrNilArgument.
func (m *Manager) Run(ctx context.Context, key Key, fn func(ctx context.Context, l *Lease) error, opts ...Option) error {
	if ctx == nil {
		return fmt.Errorf("lease: Run with nil ctx: %w", fence.ErrNilArgument)
	}
	if fn == nil {
		return fmt.Errorf("lease: Run with nil fn: %w", fence.ErrNilArgument)
	}
	if m.tr != nil {
		return m.tracedRun(ctx, key, fn, opts)
	}
	return m.run(ctx, key, fn, opts)
}

// run is Run without its span.
func (m *Manager) run(ctx context.Context, key Key, fn func(ctx context.Context, l *Lease) error, opts []Option) error {
	l, err := m.Acquire(ctx, key, opts...)
	if err != nil {
		return err
	}
	work, cancel := context.WithCancelCause(fence.WithClaim(ctx, l.claim()))
	stop := l.whenEnded(cancel)
	returned := false
	defer func() {
		if returned {
			return
		}
		// fn panicked (or called runtime.Goexit): release now, while the
		// panic unwinds, rather than leaving the lease to the renewer for
		// as long as the Manager lives; the panic then goes on unchanged.
		stop()
		cancel(ErrReleased)
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.CallTimeout)
		defer rcancel()
		_, _ = l.Release(rctx)
	}()
	ferr := fn(work, l)
	returned = true
	end := time.Now()
	stop()
	var loss error
	parked := errors.Is(l.Err(), ErrParked)
	if cause := l.Err(); cause != nil && !errors.Is(cause, ErrReleased) && !parked {
		loss = cause
		if at, mcause := l.ended(); mcause != "" {
			m.met.onOverrun(ctx, mcause, end.Sub(at))
		}
	}
	cancel(nil)
	if parked { // fn parked the lease (Lease.Park): the grant waits for Resume, it is not released
		return ferr
	}

	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.CallTimeout)
	_, rerr := l.Release(rctx)
	rcancel()
	switch {
	case loss != nil && ferr != nil:
		return fmt.Errorf("lease: %s lost during run: %w (fn returned: %w)", key, loss, ferr)
	case loss != nil:
		return fmt.Errorf("lease: %s lost during run: %w", key, loss)
	case ferr != nil:
		return ferr
	case rerr != nil:
		return fmt.Errorf("lease: release after run: %w", rerr)
	}
	return nil
}
