package lease_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease"
)

// TestRunHoldsAndReleases: fn runs while the lease is held, its context
// carries the token, and the lease is released afterwards.
func TestRunHoldsAndReleases(t *testing.T) {
	e := newEnv(t)
	m := e.manager(lease.Config{})
	k := uniqueKey(t)
	var runID uuid.UUID
	err := m.Run(bg(), k, func(ctx context.Context, l *lease.Lease) error {
		tok, ok := fence.FromContext(ctx)
		require.True(t, ok)
		require.Equal(t, l.Token(), tok)
		st, err := m.Inspect(ctx, k)
		require.NoError(t, err)
		require.Equal(t, lease.StateHeld, st.State)
		require.Equal(t, l.RunID(), st.RunID)
		runID = l.RunID()
		return nil
	})
	require.NoError(t, err)
	st, err := m.Inspect(bg(), k)
	require.NoError(t, err)
	require.Equal(t, lease.StateReleased, st.State)
	require.Equal(t, runID, st.RunID)

	// fn's error is returned as is, and the lease is still released.
	boom := errors.New("boom")
	err = m.Run(bg(), k, func(context.Context, *lease.Lease) error { return boom })
	require.ErrorIs(t, err, boom)
	require.NotErrorIs(t, err, lease.ErrLost)
	st, _ = m.Inspect(bg(), k)
	require.Equal(t, lease.StateReleased, st.State)

	// Held by someone else: Run fails with ErrHeld and fn does not run.
	other := e.manager(lease.Config{})
	_, err = other.Acquire(bg(), k)
	require.NoError(t, err)
	ran := false
	err = m.Run(bg(), k, func(context.Context, *lease.Lease) error { ran = true; return nil })
	require.ErrorIs(t, err, lease.ErrHeld)
	require.False(t, ran)
}

// TestRunNilArgument: a nil ctx or fn is refused with fence.ErrNilArgument
// and the key is not acquired.
func TestRunNilArgument(t *testing.T) {
	e := newEnv(t)
	m := e.manager(lease.Config{})
	k := uniqueKey(t)
	require.ErrorIs(t, m.Run(bg(), k, nil), fence.ErrNilArgument)
	var nilCtx context.Context
	err := m.Run(nilCtx, k, func(context.Context, *lease.Lease) error { t.Error("fn ran"); return nil })
	require.ErrorIs(t, err, fence.ErrNilArgument)
	st, err := m.Inspect(bg(), k)
	require.NoError(t, err)
	require.NotEqual(t, lease.StateHeld, st.State)
}

// TestRunReportsLoss: when the lease is lost during fn, Run's error wraps
// the loss cause even if fn returns nil or ctx.Err().
func TestRunReportsLoss(t *testing.T) {
	e := newEnv(t)
	m := e.manager(lease.Config{TTL: time.Second, RenewEvery: 100 * time.Millisecond})
	takeOver := e.replaceRun
	for _, ret := range []string{"nil", "ctx.Err"} {
		k := uniqueKey(t)
		err := m.Run(bg(), k, func(ctx context.Context, l *lease.Lease) error {
			takeOver(k)
			<-ctx.Done()
			require.ErrorIs(t, context.Cause(ctx), lease.ErrLost)
			if ret == "nil" {
				return nil
			}
			return ctx.Err()
		})
		require.ErrorIs(t, err, lease.ErrLost, "fn returned %s", ret)
		if ret == "ctx.Err" {
			require.ErrorIs(t, err, context.Canceled)
		}
		r, _ := e.row(k)
		require.False(t, r.Released, "the new holder's row is not released by the old run")
	}
}

// TestRunCallerCancel: cancelling Run's ctx cancels fn's context; the lease
// is still released (with a fresh context).
func TestRunCallerCancel(t *testing.T) {
	e := newEnv(t)
	m := e.manager(lease.Config{})
	k := uniqueKey(t)
	ctx, cancel := context.WithCancelCause(bg())
	stop := errors.New("user stopped")
	err := m.Run(ctx, k, func(wctx context.Context, l *lease.Lease) error {
		cancel(stop)
		<-wctx.Done()
		require.ErrorIs(t, context.Cause(wctx), stop)
		require.NoError(t, l.Err(), "the lease itself is still held")
		return context.Cause(wctx)
	})
	require.ErrorIs(t, err, stop)
	require.NotErrorIs(t, err, lease.ErrLost)
	st, err := m.Inspect(bg(), k)
	require.NoError(t, err)
	require.Equal(t, lease.StateReleased, st.State)
}

// TestCloseCancelsAndReleases: Close cancels every held lease (ErrClosed),
// releases the rows, is idempotent, and makes every call return ErrClosed.
func TestCloseCancelsAndReleases(t *testing.T) {
	e := newEnv(t)
	m := e.manager(lease.Config{})
	var ls []*lease.Lease
	for range 3 {
		l, err := m.Acquire(bg(), uniqueKey(t))
		require.NoError(t, err)
		ls = append(ls, l)
	}
	require.NoError(t, m.Close())
	for _, l := range ls {
		select {
		case <-l.Done():
		default:
			t.Fatal("lease context not cancelled by Close")
		}
		require.ErrorIs(t, l.Err(), lease.ErrClosed)
		r, _ := e.row(l.Key())
		require.True(t, r.Released, "Close releases the row")
		require.Equal(t, l.RunID(), r.RunID)
	}
	require.NoError(t, m.Close(), "idempotent")
	k := uniqueKey(t)
	_, err := m.Acquire(bg(), k)
	require.ErrorIs(t, err, lease.ErrClosed)
	_, err = m.AcquireWait(bg(), k)
	require.ErrorIs(t, err, lease.ErrClosed)
	_, err = m.Inspect(bg(), k)
	require.ErrorIs(t, err, lease.ErrClosed)
	_, err = m.Renew(bg(), k, uuid.New())
	require.ErrorIs(t, err, lease.ErrClosed)
	_, err = m.Release(bg(), k, uuid.New())
	require.ErrorIs(t, err, lease.ErrClosed)
	require.ErrorIs(t, m.Run(bg(), k, func(context.Context, *lease.Lease) error { return nil }), lease.ErrClosed)
	_, ok := e.row(k)
	require.False(t, ok)
}

// TestCloseWithUnreachableDatabaseIsBounded: Close with the database
// blackholed returns within about CallTimeout, leaving rows to expire.
func TestCloseWithUnreachableDatabaseIsBounded(t *testing.T) {
	e := newEnv(t)
	pool, proxy := proxiedPool(t)
	defer proxy.Restore()
	m := e.manager(lease.Config{Pool: pool, CallTimeout: 300 * time.Millisecond})
	l, err := m.Acquire(bg(), uniqueKey(t))
	require.NoError(t, err)
	proxy.Blackhole()
	start := time.Now()
	err = m.Close()
	require.Error(t, err, "the release could not be sent")
	require.Less(t, time.Since(start), 2*time.Second)
	require.ErrorIs(t, l.Err(), lease.ErrClosed)
}

// TestRunPanicReleases: fn panics (an agent runtime recovers a tool's
// panic and carries on); Run releases the lease before the panic goes on,
// so the key is free for another Manager at once, the panic value reaches
// the caller unchanged and fn's context ends with ErrReleased.
func TestRunPanicReleases(t *testing.T) {
	e := newEnv(t)
	m := e.manager(lease.Config{TTL: time.Hour})
	other := e.manager(lease.Config{})
	k := uniqueKey(t)
	ctx := bg()
	var work context.Context
	var got any
	func() {
		defer func() { got = recover() }()
		_ = m.Run(ctx, k, func(ctx context.Context, _ *lease.Lease) error {
			work = ctx
			panic("tool crashed")
		})
	}()
	require.Equal(t, "tool crashed", got, "the panic goes on to the caller")
	require.Empty(t, m.Leases(), "the Manager holds nothing")
	require.Error(t, work.Err(), "fn's context ended")
	st, err := other.Inspect(bg(), k)
	require.NoError(t, err)
	require.Equal(t, lease.StateReleased, st.State)
	l, err := other.Acquire(bg(), k)
	require.NoError(t, err, "the key is free at once, not after the TTL (an hour)")
	require.NoError(t, l.Err())

	// runtime.Goexit (t.FailNow in fn, for instance) releases too.
	k2 := uniqueKey(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = m.Run(ctx, k2, func(context.Context, *lease.Lease) error { runtime.Goexit(); return nil })
	}()
	<-done
	_, err = other.Acquire(bg(), k2)
	require.NoError(t, err)
}
