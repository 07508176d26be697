package lease_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/internal/netproxy"
	"github.com/fencekit/fencekit/lease"
)

// In heartbeat mode a lease row stays live as long as its epoch, and the
// epoch is renewed while the Manager runs. A release whose statement failed
// (an ended context, a lost connection, an acquire whose reply was lost)
// would therefore hold its key for the Manager's lifetime; these tests
// check that the Manager keeps releasing such runs until the release is
// confirmed, while its epoch and its other leases live on.

// TestHeartbeatFailedReleaseIsRetried: Lease.Release and Manager.Release
// with an ended context fail, yet the keys are free again within a few
// renewal periods, and the Manager's other lease is untouched.
func TestHeartbeatFailedReleaseIsRetried(t *testing.T) {
	e := newEnv(t)
	a := e.manager(heartbeat(lease.Config{TTL: 4 * time.Second, RenewEvery: 300 * time.Millisecond}))
	b := e.manager(heartbeat(lease.Config{TTL: 4 * time.Second, RenewEvery: 300 * time.Millisecond}))
	other, err := a.Acquire(bg(), uniqueKey(t))
	require.NoError(t, err)
	k1, k2 := uniqueKey(t), uniqueKey(t)
	l1, err := a.Acquire(bg(), k1)
	require.NoError(t, err)
	l2, err := a.Acquire(bg(), k2)
	require.NoError(t, err)

	ended, cancel := context.WithCancel(bg())
	cancel()
	_, err = l1.Release(ended)
	require.Error(t, err, "the statement was never sent")
	_, err = a.Release(ended, k2, l2.RunID())
	require.Error(t, err)
	require.ErrorIs(t, l1.Err(), lease.ErrReleased)
	require.ErrorIs(t, l2.Err(), lease.ErrReleased)

	for _, k := range []lease.Key{k1, k2} {
		waitFor(t, 3*time.Second, "the key of a failed release to be free", func() bool {
			l, err := b.Acquire(bg(), k)
			if err != nil {
				_, held := isHeld(err)
				require.True(t, held, "acquire: %v", err)
				return false
			}
			return l.Token() > l1.Token()
		})
	}
	st, err := a.Inspect(bg(), k1)
	require.NoError(t, err)
	require.Equal(t, lease.StateHeld, st.State, "held by b now")
	require.NotEqual(t, l1.RunID(), st.RunID)
	waitFor(t, time.Second, "the releases to be confirmed", func() bool { return lease.Unreleased(a) == 0 })
	require.NoError(t, other.Err(), "the Manager's other lease lives on")
	_, err = other.Renew(bg())
	require.NoError(t, err)
}

// TestHeartbeatOrphanedGrantIsReleased: an Acquire commits but its reply is
// lost and the connection is cut, so the background release of that run
// fails too. Once the network is back, the Manager releases the run: the
// key is free although the Manager's heartbeat lives on.
func TestHeartbeatOrphanedGrantIsReleased(t *testing.T) {
	e := newEnv(t)
	pool, proxy := proxiedPoolWith(t, func(c *pgxpool.Config) { c.MaxConns = 2 })
	defer proxy.Restore()
	a := e.manager(heartbeat(lease.Config{Pool: pool, TTL: 10 * time.Second, RenewEvery: 2 * time.Second, CallTimeout: time.Second}))
	b := e.manager(heartbeat(lease.Config{TTL: 10 * time.Second}))
	other, err := a.Acquire(bg(), uniqueKey(t)) // starts the epoch and prepares the statement
	require.NoError(t, err)
	// The listener's start-up traffic (its sweep, its first probe) goes
	// through the proxy too: it must be over before the proxy holds the
	// first reply, or that reply is the listener's and the Acquire below is
	// never sent.
	waitFor(t, 5*time.Second, "the listener to deliver", func() bool {
		return a.Health(bg()).Listener == lease.ListenerDelivering
	})

	var once sync.Once
	proxy.OnHold(func(netproxy.Direction) { once.Do(proxy.Cut) })
	proxy.Pause(netproxy.Downstream)
	k := uniqueKey(t)
	_, err = a.Acquire(bg(), k)
	require.Error(t, err, "the reply was lost")
	proxy.OnHold(nil)
	st, err := b.Inspect(bg(), k)
	require.NoError(t, err)
	require.Equal(t, lease.StateHeld, st.State, "the grant committed: an orphaned run of a's heartbeat holds the key")
	time.Sleep(300 * time.Millisecond) // the background release fails against the cut network
	proxy.Restore()

	waitFor(t, 5*time.Second, "the orphaned run to be released", func() bool {
		st, err := b.Inspect(bg(), k)
		require.NoError(t, err)
		return st.State == lease.StateReleased
	})
	l, err := b.Acquire(bg(), k)
	require.NoError(t, err)
	require.Greater(t, l.Token(), st.Token)
	require.NoError(t, other.Err(), "the heartbeat and the Manager's other lease live on")
}
