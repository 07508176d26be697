package lease

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type callBoundKey struct{}

// A statement's context keeps the caller's values, and its deadline is at
// most CallTimeout and at least CallTimeout minus one window after the
// statement starts; statements of one window share it, the next window
// gets a new one.
func TestCallBoundSharesOneDeadlinePerWindow(t *testing.T) {
	const timeout = 160 * time.Millisecond
	b := newCallBound(timeout)
	caller := context.WithValue(context.Background(), callBoundKey{}, "v")
	start := time.Now()

	first, cancel := b.bound(caller, start)
	defer cancel()
	require.Equal(t, "v", first.Value(callBoundKey{}))
	d, ok := first.Deadline()
	require.True(t, ok)
	require.Equal(t, start.Add(timeout), d)

	later := start.Add(b.window - time.Millisecond)
	second, cancel2 := b.bound(caller, later)
	defer cancel2()
	require.Equal(t, first.Done(), second.Done(), "same window, same deadline")
	d2, _ := second.Deadline()
	require.False(t, d2.After(later.Add(timeout)), "never more than CallTimeout away")
	require.False(t, d2.Before(later.Add(timeout-b.window)), "at most one window less than CallTimeout")

	next := start.Add(b.window)
	third, cancel3 := b.bound(caller, next)
	defer cancel3()
	require.NotEqual(t, first.Done(), third.Done(), "a new window, a new deadline")
	d3, _ := third.Deadline()
	require.Equal(t, next.Add(timeout), d3)

	<-first.Done()
	require.ErrorIs(t, first.Err(), context.DeadlineExceeded)
	require.ErrorIs(t, context.Cause(first), context.DeadlineExceeded)
}

// context.AfterFunc on a bounded context that cannot otherwise be
// cancelled (how pgx watches a statement) runs when the deadline passes,
// and not after its stop.
func TestCallBoundAfterFunc(t *testing.T) {
	b := newCallBound(80 * time.Millisecond)
	ctx, cancel := b.bound(context.Background(), time.Now())
	defer cancel()
	ran := make(chan struct{})
	context.AfterFunc(ctx, func() { close(ran) })
	stopped := make(chan struct{})
	stop := context.AfterFunc(ctx, func() { close(stopped) })
	require.True(t, stop())
	<-ran
	select {
	case <-stopped:
		t.Fatal("a stopped AfterFunc ran")
	default:
	}
}

// A cancellable caller's context: the caller's cancellation ends the
// statement's context with the caller's error, the shared deadline with
// context.DeadlineExceeded, and the returned cancel ends it too.
func TestCallBoundCancellableCaller(t *testing.T) {
	b := newCallBound(time.Hour)
	caller, cancelCaller := context.WithCancel(context.WithValue(context.Background(), callBoundKey{}, "v"))
	ctx, done := b.bound(caller, time.Now())
	defer done()
	require.Equal(t, "v", ctx.Value(callBoundKey{}))
	d, ok := ctx.Deadline()
	require.True(t, ok)
	require.WithinDuration(t, time.Now().Add(time.Hour), d, time.Minute)
	require.NoError(t, ctx.Err())
	cancelCaller()
	<-ctx.Done()
	require.ErrorIs(t, ctx.Err(), context.Canceled)

	short := newCallBound(60 * time.Millisecond)
	caller2, cancelCaller2 := context.WithCancel(context.Background())
	defer cancelCaller2()
	ctx2, done2 := short.bound(caller2, time.Now())
	defer done2()
	<-ctx2.Done()
	require.ErrorIs(t, ctx2.Err(), context.DeadlineExceeded)
	require.True(t, errors.Is(context.Cause(ctx2), context.DeadlineExceeded))
	require.NoError(t, caller2.Err(), "the caller's context is not ended by its statement's bound")

	ctx3, done3 := b.bound(caller2, time.Now())
	done3()
	<-ctx3.Done()
	require.ErrorIs(t, ctx3.Err(), context.Canceled)
}

// A caller's deadline sooner than CallTimeout bounds the statement as it
// is; a later one, or none, gets the shared bound.
func TestCallUsesSoonerCallerDeadline(t *testing.T) {
	m := &Manager{cfg: resolved{Config: Config{CallTimeout: time.Second}}, bound: newCallBound(time.Second)}
	soon, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	ctx, done := m.call(soon)
	defer done()
	require.Equal(t, soon, ctx)

	late, cancelLate := context.WithTimeout(context.Background(), time.Hour)
	defer cancelLate()
	ctx2, done2 := m.call(late)
	defer done2()
	d, ok := ctx2.Deadline()
	require.True(t, ok)
	require.False(t, d.After(time.Now().Add(time.Second)))
}
