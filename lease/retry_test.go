package lease_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/internal/netproxy"
	"github.com/fencekit/fencekit/lease"
)

// TestLostReplyRenewRetry: a renew commits but its reply is lost (the
// proxy forwards the request and holds the reply); the caller sees an
// error, and the retry reports the true state: still held, renewed again.
func TestLostReplyRenewRetry(t *testing.T) {
	e := newEnv(t)
	// One connection, so the statement prepared below is the one reused
	// when the reply is lost (a first use would hang in Prepare instead).
	pool, proxy := proxiedPoolWith(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	defer proxy.Restore()
	m := e.manager(lease.Config{Pool: pool, TTL: 30 * time.Second, RenewEvery: 20 * time.Second, CallTimeout: 500 * time.Millisecond})
	k := uniqueKey(t)
	l, err := m.Acquire(bg(), k)
	require.NoError(t, err)
	_, err = m.Renew(bg(), k, l.RunID()) // prepares the renew statement
	require.NoError(t, err)
	before, _ := e.row(k)

	proxy.Pause(netproxy.Downstream)
	_, err = m.Renew(bg(), k, l.RunID())
	require.Error(t, err, "the reply was lost")
	require.NotErrorIs(t, err, lease.ErrLost, "a lost reply is not a lost lease")
	waitFor(t, 5*time.Second, "the renew to have committed", func() bool {
		r, _ := e.row(k)
		return r.RenewedAt.After(before.RenewedAt)
	})
	require.NoError(t, l.Err(), "the lease is not ended by a lost reply")
	_, err = l.Renew(bg()) // a retry while still partitioned fails, and still does not end the lease
	require.Error(t, err)
	require.NoError(t, l.Err())

	proxy.Restore()
	r, err := m.Renew(bg(), k, l.RunID())
	require.NoError(t, err, "retry after a lost reply must report the lease as ours")
	require.Equal(t, l.Token(), r.Token)
	require.NoError(t, errOf(l.Renew(bg())))
	require.NoError(t, l.Err())
	after, _ := e.row(k)
	require.Equal(t, l.RunID(), after.RunID)
	require.Equal(t, before.Token, after.Token)
}

// TestLostReplyReleaseRetry: a release commits but its reply is lost; the
// retry reports AlreadyReleased, not an error and not "someone else".
func TestLostReplyReleaseRetry(t *testing.T) {
	e := newEnv(t)
	pool, proxy := proxiedPoolWith(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	defer proxy.Restore()
	m := e.manager(lease.Config{Pool: pool, TTL: 30 * time.Second, CallTimeout: 500 * time.Millisecond})
	warm, err := m.Acquire(bg(), uniqueKey(t))
	require.NoError(t, err)
	_, err = warm.Release(bg()) // prepares the release statement
	require.NoError(t, err)
	k := uniqueKey(t)
	l, err := m.Acquire(bg(), k)
	require.NoError(t, err)

	proxy.Pause(netproxy.Downstream)
	_, err = l.Release(bg())
	require.Error(t, err, "the reply was lost")
	require.ErrorIs(t, l.Err(), lease.ErrReleased, "the work context is cancelled before the statement is sent")
	waitFor(t, 5*time.Second, "the release to have committed", func() bool {
		r, _ := e.row(k)
		return r.Released
	})
	proxy.Restore()
	res, err := l.Release(bg())
	require.NoError(t, err)
	require.Equal(t, lease.ReleaseAlreadyDone, res)
	res, err = m.Release(bg(), k, l.RunID())
	require.NoError(t, err)
	require.Equal(t, lease.ReleaseAlreadyDone, res)
	r, _ := e.row(k)
	require.True(t, r.Released)
	require.Equal(t, l.RunID(), r.RunID, "the row is kept with the last holder")
}

// TestLowLevelOpsReportTrueState: the run_id-addressed operations called
// repeatedly (as a CLI retrying would) report the database's state.
func TestLowLevelOpsReportTrueState(t *testing.T) {
	e := newEnv(t)
	m := e.manager(lease.Config{TTL: 30 * time.Second})
	cli := e.manager(lease.Config{TTL: 30 * time.Second}) // another process, holding no *Lease
	k := uniqueKey(t)
	l, err := m.Acquire(bg(), k)
	require.NoError(t, err)

	for range 3 {
		r, err := cli.Renew(bg(), k, l.RunID())
		require.NoError(t, err)
		require.Equal(t, l.Token(), r.Token)
		require.True(t, r.ExpiresAt.After(r.DBNow))
		require.Greater(t, time.Until(r.TrustDeadline), 20*time.Second)
	}
	_, err = cli.Renew(bg(), k, uuid.New())
	require.ErrorIs(t, err, lease.ErrLost, "another run_id does not renew")

	res, err := cli.Release(bg(), k, l.RunID())
	require.NoError(t, err)
	require.Equal(t, lease.ReleaseDone, res)
	res, err = cli.Release(bg(), k, l.RunID())
	require.NoError(t, err)
	require.Equal(t, lease.ReleaseAlreadyDone, res)
	_, err = cli.Renew(bg(), k, l.RunID())
	require.ErrorIs(t, err, lease.ErrLost, "a released lease cannot be renewed")
	st, err := cli.Inspect(bg(), k)
	require.NoError(t, err)
	require.Equal(t, lease.StateReleased, st.State)
	require.False(t, st.ReleasedAt.IsZero())

	// Expired (not released, not taken over).
	l2, err := cli.Acquire(bg(), k)
	require.NoError(t, err)
	e.expire(k)
	res, err = m.Release(bg(), k, l2.RunID())
	require.NoError(t, err)
	require.Equal(t, lease.ReleaseExpired, res)
	st, err = m.Inspect(bg(), k)
	require.NoError(t, err)
	require.Equal(t, lease.StateExpired, st.State)
	require.Equal(t, time.Duration(0), st.Remaining)

	res, err = m.Release(bg(), uniqueKey(t), uuid.New())
	require.NoError(t, err)
	require.Equal(t, lease.ReleaseNotFound, res)
	st, err = m.Inspect(bg(), uniqueKey(t))
	require.NoError(t, err)
	require.Equal(t, lease.StateNotFound, st.State)
	require.False(t, st.DBNow.IsZero())
}
