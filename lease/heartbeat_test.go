package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
)

// The tests of heartbeat mode (migration 0009): they set
// Renewal: RenewalHeartbeat, so they run so whatever TEST_LEASE_RENEWAL says
// (suiteRenewal).

func heartbeat(c lease.Config) lease.Config {
	c.Renewal = lease.RenewalHeartbeat
	return c
}

// takeHeartbeat expires a Manager's heartbeat now, from another
// connection, as an operator (or a clock) would.
func (e *env) takeHeartbeat(m *lease.Manager) uuid.UUID {
	e.t.Helper()
	id := lease.EpochOf(m)
	require.NotEqual(e.t, uuid.Nil, id)
	tag, err := e.raw.Exec(bg(), fmt.Sprintf(`UPDATE %q.fencekit_managers SET expires_at = clock_timestamp() WHERE manager_id = $1`, e.schema), id)
	require.NoError(e.t, err)
	require.EqualValues(e.t, 1, tag.RowsAffected())
	return id
}

func acquireN(t *testing.T, m *lease.Manager, n int) []*lease.Lease {
	t.Helper()
	ls := make([]*lease.Lease, n)
	for i := range ls {
		l, err := m.Acquire(bg(), uniqueKey(t))
		require.NoError(t, err)
		ls[i] = l
	}
	return ls
}

func waitEnded(t *testing.T, l *lease.Lease, d time.Duration) error {
	t.Helper()
	select {
	case <-l.Done():
		return l.Err()
	case <-time.After(d):
		t.Fatalf("lease %s not ended within %s", l.Key(), d)
		return nil
	}
}

// TestHeartbeatManyLeasesOneStatement: 200 leases of one Manager are kept by
// one statement per renewal period that carries all of them; the lease
// rows are written once, at the grant, and never by a renewal.
func TestHeartbeatManyLeasesOneStatement(t *testing.T) {
	e := newEnv(t)
	const n = 200
	renewEvery := 300 * time.Millisecond
	m, ev, err := lease.NewObserved(heartbeat(lease.Config{Pool: fencetest.Pool(t), Schema: e.schema, TTL: 2 * time.Second, RenewEvery: renewEvery}))
	require.NoError(t, err)
	defer m.Close()
	acct := "acct-" + uuid.NewString()
	leases := make([]*lease.Lease, n)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < n; i += 4 {
				l, err := m.Acquire(bg(), lease.Key{AccountID: acct, SessionID: fmt.Sprint(i)})
				if err != nil {
					errs <- err
					return
				}
				leases[i] = l
			}
		})
	}
	wg.Wait()
	close(errs)
	require.NoError(t, <-errs)
	epoch := lease.EpochOf(m)
	var rows int
	require.NoError(t, e.raw.QueryRow(bg(), fmt.Sprintf(`SELECT count(*) FROM %q.fencekit_leases
		WHERE account_id = $1 AND expires_at = 'infinity' AND manager_id = $2`, e.schema), acct, epoch).Scan(&rows))
	require.Equal(t, n, rows, "every row is a heartbeat row of the Manager's epoch")
	for _, l := range leases {
		require.Equal(t, epoch, lease.EpochOfLease(l))
	}

	first := leases[0].TrustDeadline()
	seen, _, _ := ev.Snapshot()
	start := time.Now()
	var stmts []int
	waitFor(t, 10*time.Second, "three heartbeats", func() bool {
		all, _, _ := ev.Snapshot()
		stmts = all[len(seen):]
		return len(stmts) >= 3
	})
	elapsed := time.Since(start)
	for _, s := range stmts {
		require.Equal(t, n, s, "each heartbeat statement keeps all %d leases", n)
	}
	require.LessOrEqual(t, len(stmts), int(elapsed/renewEvery)+2, "%d statements in %s", len(stmts), elapsed)
	for _, l := range leases {
		require.NoError(t, l.Err())
		require.True(t, l.TrustDeadline().After(first), "trust moved by the heartbeat")
		require.Equal(t, leases[0].TrustDeadline(), l.TrustDeadline(), "one trust deadline for the epoch")
	}
	var touched int
	require.NoError(t, e.raw.QueryRow(bg(), fmt.Sprintf(`SELECT count(*) FROM %q.fencekit_leases
		WHERE account_id = $1 AND renewed_at <> acquired_at`, e.schema), acct).Scan(&touched))
	require.Zero(t, touched, "no renewal wrote a lease row")
	st, err := m.Inspect(bg(), leases[0].Key())
	require.NoError(t, err)
	require.Equal(t, lease.StateHeld, st.State)
	require.True(t, st.RenewedAt.After(st.AcquiredAt), "Inspect reports the heartbeat's renewal")
	t.Logf("%d leases kept by %d statements in %s (sizes %v)", n, len(stmts), elapsed.Round(time.Millisecond), stmts)
}

// TestHeartbeatTakenAway: when a Manager's heartbeat is expired from
// another connection, another Manager acquires its keys at once, exactly
// that Manager's leases end (ErrLost, at its next heartbeat), another
// Manager's are untouched, and its next Acquire starts a new epoch.
func TestHeartbeatTakenAway(t *testing.T) {
	e := newEnv(t)
	cfg := heartbeat(lease.Config{TTL: 2 * time.Second, RenewEvery: 200 * time.Millisecond})
	a, b, c := e.manager(cfg), e.manager(cfg), e.manager(cfg)
	la, lb := acquireN(t, a, 3), acquireN(t, b, 2)
	old := e.takeHeartbeat(a)

	got, err := c.Acquire(bg(), la[0].Key())
	require.NoError(t, err, "the dead heartbeat's key is free at once")
	require.Greater(t, got.Token(), la[0].Token())
	for _, l := range la {
		require.ErrorIs(t, waitEnded(t, l, 5*time.Second), lease.ErrLost)
	}
	firstB := lb[0].TrustDeadline()
	waitFor(t, 5*time.Second, "b's next heartbeat", func() bool { return lb[0].TrustDeadline().After(firstB) })
	for _, l := range lb {
		require.NoError(t, l.Err(), "another Manager's leases are untouched")
	}
	again, err := a.Acquire(bg(), la[1].Key())
	require.NoError(t, err, "a acquires again, with a new heartbeat")
	require.NotEqual(t, old, lease.EpochOf(a))
	require.Equal(t, lease.EpochOf(a), lease.EpochOfLease(again))
	st, err := b.Inspect(bg(), la[2].Key())
	require.NoError(t, err)
	require.Equal(t, lease.StateExpired, st.State, "the dead heartbeat's rows read as expired")
	res, err := la[2].Release(bg())
	require.NoError(t, err)
	require.Equal(t, lease.ReleaseExpired, res, "releasing a row of a dead heartbeat reports it expired, as for a per-lease row")
	st, err = b.Inspect(bg(), la[2].Key())
	require.NoError(t, err)
	require.Equal(t, lease.StateExpired, st.State, "a release changes nothing on a dead row")
}

// TestHeartbeatTakeoverLearnedFromHeartbeat: with the takeover's
// notification lost, exactly the displaced lease ends, with ErrTakenOver,
// at its Manager's next heartbeat; its other leases stay held.
func TestHeartbeatTakeoverLearnedFromHeartbeat(t *testing.T) {
	e := newEnv(t)
	cfg := heartbeat(lease.Config{TTL: 2 * time.Second, RenewEvery: 200 * time.Millisecond})
	a, b := e.manager(cfg), e.manager(cfg)
	lease.MuteTakeoverNotify(b)
	la := acquireN(t, a, 2)
	_, err := b.Takeover(bg(), la[0].Key())
	require.NoError(t, err)
	require.ErrorIs(t, waitEnded(t, la[0], 5*time.Second), lease.ErrTakenOver)
	first := la[1].TrustDeadline()
	waitFor(t, 5*time.Second, "a's next heartbeat", func() bool { return la[1].TrustDeadline().After(first) })
	require.NoError(t, la[1].Err())
}

// TestHeartbeatRevokeLearnedAtNextBeat: Revoke of a heartbeat row from
// another Manager ends exactly that lease, with ErrLost, at its holder's
// next heartbeat, and frees the key at once.
func TestHeartbeatRevokeLearnedAtNextBeat(t *testing.T) {
	e := newEnv(t)
	cfg := heartbeat(lease.Config{TTL: 2 * time.Second, RenewEvery: 200 * time.Millisecond})
	a, op := e.manager(cfg), e.manager(cfg)
	la := acquireN(t, a, 2)
	r, err := op.RevokeCurrent(bg(), la[0].Key())
	require.NoError(t, err)
	require.True(t, r.Revoked)
	require.Equal(t, la[0].RunID(), r.RunID)
	require.Equal(t, lease.StateExpired, r.Ownership.State)
	got, err := op.Acquire(bg(), la[0].Key())
	require.NoError(t, err, "the revoked key is free at once")
	require.Greater(t, got.Token(), la[0].Token())
	require.ErrorIs(t, waitEnded(t, la[0], 5*time.Second), lease.ErrLost)
	require.NoError(t, la[1].Err(), "the holder's other lease stays")
	r, err = op.Revoke(bg(), la[1].Key(), uuid.New())
	require.NoError(t, err)
	require.False(t, r.Revoked, "another run's revoke leaves the grant alone")
	require.NoError(t, la[1].Err())
}

// TestHeartbeatStalledManager: a Manager whose heartbeat statements get no
// reply (its network blackholed after one successful heartbeat) loses every
// lease at its trust deadline, and another Manager that keeps trying is
// granted a key only after that deadline: the stalled Manager never trusts
// a key another Manager was granted. Once the network is back, its next
// Acquire starts a new epoch.
func TestHeartbeatStalledManager(t *testing.T) {
	e := newEnv(t)
	pool, proxy := proxiedPool(t)
	defer proxy.Restore()
	cfg := heartbeat(lease.Config{TTL: time.Second, RenewEvery: 200 * time.Millisecond})
	b := e.manager(cfg)
	cfg.Pool = pool
	a := e.manager(cfg)
	la := acquireN(t, a, 3)
	old := lease.EpochOf(a)
	first := la[0].TrustDeadline()
	waitFor(t, 5*time.Second, "one heartbeat", func() bool { return la[0].TrustDeadline().After(first) })
	proxy.Blackhole()

	var grantedAt time.Time
	deadline := time.Now().Add(10 * time.Second)
	for {
		require.True(t, time.Now().Before(deadline), "b never acquired the stalled Manager's key")
		_, err := b.Acquire(bg(), la[0].Key())
		grantedAt = time.Now()
		if err == nil {
			break
		}
		_, held := isHeld(err)
		require.True(t, held, "unexpected error: %v", err)
		time.Sleep(5 * time.Millisecond)
	}
	trust := la[0].TrustDeadline()
	require.True(t, trust.Before(grantedAt), "a trusted its lease until %s after b's grant returned", trust.Sub(grantedAt))
	require.Zero(t, la[0].Remaining())
	t.Logf("a's trust deadline %s before b's grant returned", grantedAt.Sub(trust).Round(time.Millisecond))
	for _, l := range la {
		require.ErrorIs(t, waitEnded(t, l, 5*time.Second), lease.ErrTrustExpired)
	}
	proxy.Restore()
	l, err := a.Acquire(bg(), la[1].Key())
	require.NoError(t, err)
	require.NotEqual(t, old, lease.EpochOfLease(l), "a new epoch")
}

// TestHeartbeatLockedHeartbeatRow: a heartbeat statement blocked by a lock
// on the heartbeat row ends the leases by the trust deadline too (ErrLost
// once less than CallTimeout of the heartbeat is left: the renewal's
// condition refuses it without waiting for the lock), and the key goes to
// another Manager only after that.
func TestHeartbeatLockedHeartbeatRow(t *testing.T) {
	e := newEnv(t)
	cfg := heartbeat(lease.Config{TTL: time.Second, RenewEvery: 200 * time.Millisecond})
	a, b := e.manager(cfg), e.manager(cfg)
	la := acquireN(t, a, 2)
	tx, err := e.raw.Begin(bg())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(bg()) }()
	_, err = tx.Exec(bg(), fmt.Sprintf(`SELECT 1 FROM %q.fencekit_managers WHERE manager_id = $1 FOR UPDATE`, e.schema), lease.EpochOf(a))
	require.NoError(t, err)
	var grantedAt time.Time
	deadline := time.Now().Add(10 * time.Second)
	for {
		require.True(t, time.Now().Before(deadline), "b never acquired the key")
		_, err := b.Acquire(bg(), la[0].Key())
		grantedAt = time.Now()
		if err == nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, l := range la {
		err := waitEnded(t, l, 5*time.Second)
		require.True(t, errors.Is(err, lease.ErrTrustExpired) || errors.Is(err, lease.ErrLost), "ended with %v", err)
	}
	require.True(t, la[0].TrustDeadline().Before(grantedAt))
}

// TestHeartbeatCloseEndsEpoch: Close releases the leases and expires the
// heartbeat, so a row its release missed is free at once.
func TestHeartbeatCloseEndsEpoch(t *testing.T) {
	e := newEnv(t)
	cfg := heartbeat(lease.Config{TTL: time.Minute})
	a, b := e.manager(cfg), e.manager(cfg)
	la := acquireN(t, a, 2)
	id := lease.EpochOf(a)
	// A row of the epoch that Close does not know (an acquire whose reply
	// was lost): written behind the Manager's back as the statement would.
	k := uniqueKey(t)
	_, err := e.raw.Exec(bg(), fmt.Sprintf(`INSERT INTO %q.fencekit_leases (account_id, session_id, run_id, fence_token, acquired_at, renewed_at, expires_at, manager_id)
		VALUES ($1, $2, gen_random_uuid(), nextval('%[1]q.fencekit_token_seq'), now(), now(), 'infinity', $3)`, e.schema), k.AccountID, k.SessionID, id)
	require.NoError(t, err)
	_, err = b.Acquire(bg(), k)
	_, held := isHeld(err)
	require.True(t, held, "held while a's heartbeat lives: %v", err)
	require.NoError(t, a.Close())
	for _, l := range la {
		require.ErrorIs(t, l.Err(), lease.ErrClosed)
		st, err := b.Inspect(bg(), l.Key())
		require.NoError(t, err)
		require.Equal(t, lease.StateReleased, st.State)
	}
	_, err = b.Acquire(bg(), k)
	require.NoError(t, err, "the heartbeat ended at Close")
}

// TestHeartbeatLeaseRenew: Lease.Renew in heartbeat mode renews the
// heartbeat now (every lease's trust moves) and reports the run's token;
// Renew of a revoked run fails with ErrLost.
func TestHeartbeatLeaseRenew(t *testing.T) {
	e := newEnv(t)
	m := e.manager(heartbeat(lease.Config{TTL: 10 * time.Second}))
	la := acquireN(t, m, 2)
	before := la[1].TrustDeadline()
	r, err := la[0].Renew(bg())
	require.NoError(t, err)
	require.Equal(t, la[0].Token(), r.Token)
	require.True(t, la[1].TrustDeadline().After(before), "the other lease's trust moved too")
	require.Equal(t, la[0].TrustDeadline(), r.TrustDeadline)
	require.True(t, r.ExpiresAt.After(r.DBNow))
	e.expire(la[0].Key())
	_, err = la[0].Renew(bg())
	require.ErrorIs(t, err, lease.ErrLost)
	require.ErrorIs(t, la[0].Err(), lease.ErrLost)
	require.NoError(t, la[1].Err())
	// Another Manager's Renew by run_id only checks the heartbeat row.
	other := e.manager(heartbeat(lease.Config{TTL: 10 * time.Second}))
	r, err = other.Renew(context.Background(), la[1].Key(), la[1].RunID())
	require.NoError(t, err)
	require.Equal(t, la[1].Token(), r.Token)
	require.False(t, r.TrustDeadline.After(la[1].TrustDeadline().Add(time.Second)))
}

// TestHeartbeatWatchExpiry: Watch reports a heartbeat's renewals and, when
// the heartbeat expires, the key's expiry (WatchExpired), from the heartbeat
// row's expiry alone.
func TestHeartbeatWatchExpiry(t *testing.T) {
	e := newEnv(t)
	cfg := heartbeat(lease.Config{TTL: 2 * time.Second, RenewEvery: 200 * time.Millisecond})
	a, w := e.manager(cfg), e.manager(cfg)
	l := acquireN(t, a, 1)[0]
	ctx, cancel := context.WithTimeout(bg(), 10*time.Second)
	defer cancel()
	watcher, err := w.Watch(ctx, l.Key(), lease.WithWatchPoll(100*time.Millisecond))
	require.NoError(t, err)
	defer watcher.Close()
	ev, err := watcher.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, lease.WatchCurrent, ev.Kind)
	require.Equal(t, lease.StateHeld, ev.State)
	for {
		ev, err = watcher.Next(ctx)
		require.NoError(t, err)
		if ev.Kind == lease.WatchRenewed {
			break // the heartbeat moved the key's expiry
		}
	}
	e.takeHeartbeat(a)
	for {
		ev, err = watcher.Next(ctx)
		require.NoError(t, err, "no WatchExpired after the heartbeat expired")
		if ev.Kind == lease.WatchExpired {
			break
		}
		require.Equal(t, lease.WatchRenewed, ev.Kind, "unexpected event %+v", ev)
	}
	require.Equal(t, l.RunID(), ev.RunID)
	require.Equal(t, lease.StateExpired, ev.State)
}

// TestHeartbeatGrantSeesEpochNewerThanItsSnapshot: an Acquire that took its
// snapshot and then waited on the key's row lock must not read a holder
// whose heartbeat epoch was created after that snapshot as dead. The row
// lock is held from a separate connection, which then writes the key's row
// as a fresh grant of Manager b would (b's epoch created after a's
// statement began, acquired_at the database time of that write). With the
// plain live() in the ON CONFLICT condition, a's statement did not see b's
// epoch in its snapshot and granted the key a second time.
func TestHeartbeatGrantSeesEpochNewerThanItsSnapshot(t *testing.T) {
	e := newEnv(t)
	a := e.manager(heartbeat(lease.Config{}))
	b := e.manager(heartbeat(lease.Config{}))
	k := uniqueKey(t)
	l, err := a.Acquire(bg(), k)
	require.NoError(t, err)
	_, err = l.Release(bg())
	require.NoError(t, err)

	locker, err := e.raw.Begin(bg())
	require.NoError(t, err)
	defer func() { _ = locker.Rollback(bg()) }()
	_, err = locker.Exec(bg(), fmt.Sprintf(`SELECT 1 FROM %q.fencekit_leases WHERE account_id = $1 AND session_id = $2 FOR UPDATE`, e.schema), k.AccountID, k.SessionID)
	require.NoError(t, err)

	type result struct {
		l   *lease.Lease
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := a.Acquire(bg(), k)
		done <- result{l, err}
	}()
	// a's acquire has its snapshot once it waits for the row lock.
	waitFor(t, 10*time.Second, "a's acquire waiting on the row lock", func() bool {
		var n int
		_ = e.raw.QueryRow(bg(), `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%fencekit_leases%' AND pid <> pg_backend_pid()`).Scan(&n)
		return n > 0
	})
	// b starts its epoch now, after a's snapshot (its first grant, another key).
	_, err = b.Acquire(bg(), uniqueKey(t))
	require.NoError(t, err)
	bEpoch := lease.EpochOf(b)
	require.NotEqual(t, uuid.Nil, bEpoch)
	_, err = locker.Exec(bg(), fmt.Sprintf(`UPDATE %[1]q.fencekit_leases
   SET run_id = gen_random_uuid(), fence_token = nextval('%[1]s.fencekit_token_seq'),
       acquired_at = clock_timestamp(), renewed_at = clock_timestamp(), expires_at = 'infinity',
       released_at = NULL, manager_id = $3
 WHERE account_id = $1 AND session_id = $2`, e.schema), k.AccountID, k.SessionID, bEpoch)
	require.NoError(t, err)
	require.NoError(t, locker.Commit(bg()))

	select {
	case r := <-done:
		require.ErrorIs(t, r.err, lease.ErrHeld, "a granted a key whose holder's epoch is live (double grant)")
		require.Nil(t, r.l)
	case <-time.After(20 * time.Second):
		t.Fatal("a's acquire did not return")
	}
}
