package lease_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
)

// everyExecMode are pgx's query execution modes; every statement must work in
// each of them (and behind PgBouncer's transaction pooling, which rules out
// the cached-statement modes' server-side state only).
var everyExecMode = []pgx.QueryExecMode{
	pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
	pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol,
}

// poolInMode opens an independent pool whose statements use mode.
func poolInMode(t *testing.T, mode pgx.QueryExecMode) *pgxpool.Pool {
	t.Helper()
	return fencetest.PoolWith(t, fencetest.DatabaseURL(), func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = mode })
}

// TestRevoke, in every exec mode: another process's Revoke ends the live
// grant in one statement — the holder's renewal is refused (ErrLost, its
// context ends), its release reports ReleaseExpired, the next grant takes a
// larger token — and a revoke of a key nobody holds (never acquired,
// released, expired, or held by another run than the one named) changes
// nothing and reports the state.
func TestRevoke(t *testing.T) {
	for _, mode := range everyExecMode {
		t.Run(mode.String(), func(t *testing.T) {
			e := newEnv(t)
			holder := e.manager(lease.Config{})
			op := e.manager(lease.Config{Pool: poolInMode(t, mode)})
			k := uniqueKey(t)
			l, err := holder.Acquire(bg(), k, lease.WithHolder("desktop"))
			require.NoError(t, err)

			r, err := op.RevokeCurrent(bg(), k)
			require.NoError(t, err)
			require.True(t, r.Revoked)
			require.Equal(t, l.RunID(), r.RunID)
			require.Equal(t, l.Token(), r.Token)
			require.Equal(t, lease.StateExpired, r.Ownership.State)
			require.Equal(t, "desktop", r.Ownership.Holder)
			row, ok := e.row(k)
			require.True(t, ok)
			require.False(t, row.Released, "a revoked grant expired, it was not released")
			require.False(t, row.ExpiresAt.After(r.Ownership.DBNow))

			_, err = l.Renew(bg())
			require.ErrorIs(t, err, lease.ErrLost)
			require.NotErrorIs(t, err, lease.ErrTakenOver)
			<-l.Done()
			require.ErrorIs(t, context.Cause(l.Context()), lease.ErrLost)
			res, err := holder.Release(bg(), k, l.RunID())
			require.NoError(t, err)
			require.Equal(t, lease.ReleaseExpired, res)

			next, err := op.Acquire(bg(), k)
			require.NoError(t, err)
			require.Greater(t, next.Token(), l.Token())

			rows := e.rowCount()
			// Naming the revoked run leaves the new holder alone.
			r, err = op.Revoke(bg(), k, l.RunID())
			require.NoError(t, err)
			require.False(t, r.Revoked)
			require.Equal(t, lease.StateHeld, r.Ownership.State)
			require.Equal(t, next.RunID(), r.Ownership.RunID)
			_, err = next.Renew(bg())
			require.NoError(t, err, "the new holder still holds the key")

			// Nobody holds these: nothing changes, the state is reported.
			r, err = op.RevokeCurrent(bg(), uniqueKey(t))
			require.NoError(t, err)
			require.False(t, r.Revoked)
			require.Equal(t, lease.StateNotFound, r.Ownership.State)
			_, err = next.Release(bg())
			require.NoError(t, err)
			before, _ := e.row(k)
			r, err = op.RevokeCurrent(bg(), k)
			require.NoError(t, err)
			require.False(t, r.Revoked)
			require.Equal(t, lease.StateReleased, r.Ownership.State)
			after, _ := e.row(k)
			require.Equal(t, before, after)
			require.Equal(t, rows, e.rowCount())

			// Naming the live run revokes it.
			again, err := holder.Acquire(bg(), k)
			require.NoError(t, err)
			r, err = op.Revoke(bg(), k, again.RunID())
			require.NoError(t, err)
			require.True(t, r.Revoked)
			require.Equal(t, again.Token(), r.Token)
		})
	}
}

// TestRevokeOwnLeaseAndWaiters: a Lease of the revoking Manager ends at
// once with ErrLost; a waiter of another process (AcquireWait, its
// safety-net poll an hour away) is woken by the revocation's notification
// and acquires with a larger token.
func TestRevokeOwnLeaseAndWaiters(t *testing.T) {
	e := newEnv(t)
	m := e.manager(lease.Config{})
	waiter := e.manager(lease.Config{WaitPoll: time.Hour})
	k := uniqueKey(t)
	l, err := m.Acquire(bg(), k)
	require.NoError(t, err)

	type result struct {
		l   *lease.Lease
		err error
	}
	got := make(chan result, 1)
	ctx, cancel := context.WithTimeout(bg(), time.Minute)
	defer cancel()
	go func() {
		wl, err := waiter.AcquireWait(ctx, k)
		got <- result{wl, err}
	}()
	// The waiter has flagged the holder's row before it sleeps.
	waitFor(t, 30*time.Second, "the waiter to mark the key contended", func() bool {
		var c bool
		require.NoError(t, e.raw.QueryRow(bg(), fmt.Sprintf(`SELECT contended FROM %q.fencekit_leases WHERE account_id=$1 AND session_id=$2`, e.schema),
			k.AccountID, k.SessionID).Scan(&c))
		return c
	})

	r, err := m.RevokeCurrent(bg(), k)
	require.NoError(t, err)
	require.True(t, r.Revoked)
	select {
	case <-l.Done():
	default:
		t.Fatal("the revoking Manager's own lease is still live")
	}
	require.ErrorIs(t, context.Cause(l.Context()), lease.ErrLost)

	res := <-got
	require.NoError(t, res.err)
	require.Greater(t, res.l.Token(), l.Token())
	_, err = res.l.Release(bg())
	require.NoError(t, err)
}

// TestRevokeBadInput: an invalid key, the zero run_id, a closed Manager and
// an Authorizer's refusal send nothing and end nothing.
func TestRevokeBadInput(t *testing.T) {
	e := newEnv(t)
	deny := errors.New("operators only")
	m := e.manager(lease.Config{})
	guarded := e.manager(lease.Config{Authorizer: lease.AuthorizerFunc(func(context.Context, lease.Key) error { return deny })})
	k := uniqueKey(t)
	l, err := m.Acquire(bg(), k)
	require.NoError(t, err)

	_, err = m.Revoke(bg(), lease.Key{AccountID: "a", SessionID: "b\x00"}, l.RunID())
	require.ErrorIs(t, err, lease.ErrInvalidKey)
	_, err = m.RevokeCurrent(bg(), lease.Key{AccountID: "a", SessionID: "b\x00"})
	require.ErrorIs(t, err, lease.ErrInvalidKey)
	// uuid.Nil is invalid input, as for Release, Renew and Resume; "any
	// run" is RevokeCurrent.
	_, err = m.Revoke(bg(), k, uuid.Nil)
	require.ErrorIs(t, err, lease.ErrInvalidRunID)
	require.ErrorIs(t, err, fence.ErrInvalidRun)
	_, err = guarded.Revoke(bg(), k, l.RunID())
	require.ErrorIs(t, err, lease.ErrUnauthorized)
	require.ErrorIs(t, err, deny)
	_, err = guarded.RevokeCurrent(bg(), k)
	require.ErrorIs(t, err, lease.ErrUnauthorized)
	closed, err := lease.New(lease.Config{Pool: e.raw, Schema: e.schema})
	require.NoError(t, err)
	require.NoError(t, closed.Close())
	_, err = closed.Revoke(bg(), k, l.RunID())
	require.ErrorIs(t, err, lease.ErrClosed)
	_, err = closed.RevokeCurrent(bg(), k)
	require.ErrorIs(t, err, lease.ErrClosed)

	_, err = l.Renew(bg())
	require.NoError(t, err, "still held")
	_, err = l.Release(bg())
	require.NoError(t, err)
}
