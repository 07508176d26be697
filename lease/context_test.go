package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease"
)

type ctxKey struct{}

// TestLeaseContextKeepsCallerValues: a value set on the Acquire ctx (a user
// id, a trace span, a logger) is visible in the lease's context, which also
// carries the claim (token and run_id); cancelling the Acquire ctx after the
// call does not end the lease.
func TestLeaseContextKeepsCallerValues(t *testing.T) {
	e := newEnv(t)
	m := e.manager(lease.Config{})
	ctx, cancel := context.WithCancel(context.WithValue(bg(), ctxKey{}, "user-7"))
	key := uniqueKey(t)
	l, err := m.Acquire(ctx, key)
	require.NoError(t, err)
	require.Equal(t, "user-7", l.Context().Value(ctxKey{}))
	c, err := fence.ClaimFromContext(l.Context())
	require.NoError(t, err)
	require.Equal(t, fence.Claim{Token: l.Token(), Run: l.RunID().String(), Scope: key.Scope()}, c)
	// The claim's scope holds the key's resources and no other key's: a
	// strict guard refuses it for those (fence.CheckScope).
	require.NoError(t, fence.CheckScope(key.Resource("notes"), c))
	other := lease.Key{AccountID: key.AccountID, SessionID: key.SessionID + "-other"}
	require.ErrorIs(t, fence.CheckScope(other.Resource("notes"), c), fence.ErrOutOfScope)

	cancel() // the call is over: the lease keeps the values, not the cancellation
	require.NoError(t, l.Context().Err())
	require.NoError(t, errOf(l.Renew(bg())))
	require.NoError(t, l.Err())

	_, err = l.Release(bg())
	require.NoError(t, err)
	require.ErrorIs(t, context.Cause(l.Context()), lease.ErrReleased)
	require.Equal(t, "user-7", l.Context().Value(ctxKey{}))
}

// TestRunContextIsChildOfCaller: fn's ctx carries the caller's values and
// deadline and the claim; cancelling the caller cancels the work (with the
// caller's cause) and the lease is released afterwards.
func TestRunContextIsChildOfCaller(t *testing.T) {
	e := newEnv(t)
	m := e.manager(lease.Config{})
	k := uniqueKey(t)
	deadline := time.Now().Add(time.Hour)
	base, stopBase := context.WithDeadline(context.WithValue(bg(), ctxKey{}, "trace-1"), deadline)
	defer stopBase()
	ctx, cancel := context.WithCancelCause(base)
	stopped := errors.New("request aborted")
	started := make(chan struct{})
	var sawValue any
	var sawDeadline time.Time
	var sawCause error
	done := make(chan error, 1)
	go func() {
		done <- m.Run(ctx, k, func(work context.Context, l *lease.Lease) error {
			sawValue = work.Value(ctxKey{})
			sawDeadline, _ = work.Deadline()
			tok, ok := fence.FromContext(work)
			if !ok || tok != l.Token() {
				t.Errorf("work ctx token = %d, %v; want %d", tok, ok, l.Token())
			}
			close(started)
			<-work.Done()
			sawCause = context.Cause(work)
			return work.Err()
		})
	}()
	<-started
	require.NoError(t, ctx.Err())
	cancel(stopped)
	err := <-done
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, "trace-1", sawValue)
	require.True(t, sawDeadline.Equal(deadline), "work deadline %v, want the caller's %v", sawDeadline, deadline)
	require.ErrorIs(t, sawCause, stopped)
	st, err := m.Inspect(bg(), k)
	require.NoError(t, err)
	require.Equal(t, lease.StateReleased, st.State)
}
