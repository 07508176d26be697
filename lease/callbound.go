package lease

import (
	"context"
	"errors"
	"sync"
	"time"
)

// callWindows is how many windows one CallTimeout holds: the statements
// started in one window (CallTimeout/callWindows) share one deadline.
const callWindows = 16

// callBound is the CallTimeout bound of a Manager's statements. A timer
// per statement made the Go runtime wake an idle thread to watch each new
// one (docs/performance.md, "A statement's bound without a timer of its
// own"); instead the statements started within one window share a
// deadline context whose deadline is the window's start plus CallTimeout.
// So a statement is bounded by CallTimeout at the most and by
// (1 − 1/callWindows) of it at the least, and the Manager starts one timer
// per window in which it sends statements.
type callBound struct {
	timeout, window time.Duration

	mu     sync.Mutex
	start  time.Time       // the current window's start
	ctx    context.Context // its deadline: start + timeout
	cancel context.CancelFunc
}

func newCallBound(timeout time.Duration) *callBound {
	return &callBound{timeout: timeout, window: timeout / callWindows}
}

// shared returns the deadline context of the window now falls in.
func (b *callBound) shared(now time.Time) context.Context {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ctx == nil || now.Sub(b.start) >= b.window || now.Before(b.start) {
		// The cancel func is kept, not called: statements of this window
		// use ctx until its deadline, whose timer then releases it.
		b.start = now
		b.ctx, b.cancel = context.WithDeadline(context.Background(), now.Add(b.timeout)) //nolint:gosec // G118: ended by its deadline (above)
	}
	return b.ctx
}

// bound returns ctx bounded by the shared deadline of now's window. A ctx
// that cannot be cancelled gets its values under the shared deadline, with
// nothing to undo; any other gets a child context that the shared deadline
// or ctx ends, and a cancel func that must be called when the statement
// returns.
func (b *callBound) bound(ctx context.Context, now time.Time) (context.Context, context.CancelFunc) {
	shared := b.shared(now)
	if ctx.Done() == nil {
		return valuesUnder{Context: ctx, bound: shared}, func() {}
	}
	cctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(shared, func() { cancel(context.DeadlineExceeded) })
	return endedBy{Context: cctx, bound: shared}, func() {
		stop()
		cancel(context.Canceled)
	}
}

// valuesUnder is a context that cannot be cancelled (its values) under a
// shared deadline: Deadline, Done and Err are the deadline's.
type valuesUnder struct {
	context.Context
	bound context.Context
}

func (c valuesUnder) Deadline() (time.Time, bool) { return c.bound.Deadline() }
func (c valuesUnder) Done() <-chan struct{}       { return c.bound.Done() }
func (c valuesUnder) Err() error                  { return c.bound.Err() }

// AfterFunc registers f with the shared deadline, so that context.AfterFunc
// (pgx watches a statement's context with it) needs no goroutine.
func (c valuesUnder) AfterFunc(f func()) func() bool { return context.AfterFunc(c.bound, f) }

// endedBy is a cancellable caller's context under a shared deadline: a
// child of the caller's that the deadline cancels with cause
// context.DeadlineExceeded, reported by Err as a deadline's end is.
type endedBy struct {
	context.Context
	bound context.Context
}

// Deadline is the shared deadline's: the caller's, if any, is later (call
// passes a caller's sooner deadline on as it is).
func (c endedBy) Deadline() (time.Time, bool) { return c.bound.Deadline() }

func (c endedBy) Err() error {
	err := c.Context.Err()
	if err != nil && errors.Is(context.Cause(c.Context), context.DeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return err
}
