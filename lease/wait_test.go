package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
)

type waitResult struct {
	l            *lease.Lease
	err          error
	afterRelease bool
}

// startWait runs AcquireWait in the background and waits until the waiter
// has gone to sleep after a refused attempt.
//
// first says whether this is the Manager's first waiter (the one that
// starts its listener).
func startWait(t *testing.T, m *lease.Manager, ev *lease.Events, ctx context.Context, k lease.Key, released *atomic.Bool, first bool) <-chan waitResult {
	t.Helper()
	out := make(chan waitResult, 1)
	go func() {
		l, err := m.AcquireWait(ctx, k)
		out <- waitResult{l, err, released != nil && released.Load()}
	}()
	// The first attempt runs once LISTEN is up; the listener's connect also
	// pokes every waiter (notifications may have been missed before it), so
	// the sequence is: waiting, woken "reconnect", waiting.
	expectWaiting(t, ev, k, out)
	if first {
		expectWoken(t, ev, "reconnect")
		expectWaiting(t, ev, k, out)
	}
	return out
}

func expectWaiting(t *testing.T, ev *lease.Events, k lease.Key, out <-chan waitResult) {
	t.Helper()
	select {
	case got := <-ev.Waiting():
		require.Equal(t, k, got)
	case r := <-out:
		t.Fatalf("AcquireWait returned before waiting: %v", r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("AcquireWait did not start waiting")
	}
}

func expectWoken(t *testing.T, ev *lease.Events, reason string) {
	t.Helper()
	select {
	case got := <-ev.Woken():
		require.Equal(t, reason, got)
	case <-time.After(10 * time.Second):
		t.Fatalf("waiter not woken (%s)", reason)
	}
}

func observed(t *testing.T, e *env, cfg lease.Config) (*lease.Manager, *lease.Events) {
	t.Helper()
	if cfg.Pool == nil {
		cfg.Pool = fencetest.Pool(t)
	}
	cfg.Schema = e.schema
	m, ev, err := lease.NewObserved(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m, ev
}

// TestAcquireWaitWokenByRelease: a waiter is woken by the release NOTIFY,
// promptly, and only after the release: its poll interval (1h) and the
// holder's expiry (60s) are both far beyond the test's bound.
func TestAcquireWaitWokenByRelease(t *testing.T) {
	e := newEnv(t)
	holder := e.manager(lease.Config{TTL: time.Minute})
	w, ev := observed(t, e, lease.Config{WaitPoll: time.Hour})
	k := uniqueKey(t)
	hl, err := holder.Acquire(bg(), k)
	require.NoError(t, err)

	var released atomic.Bool
	out := startWait(t, w, ev, bg(), k, &released, true)
	released.Store(true) // every event after this point is "after the release began"
	start := time.Now()
	res, err := hl.Release(bg())
	require.NoError(t, err)
	require.Equal(t, lease.ReleaseDone, res)

	var r waitResult
	select {
	case r = <-out:
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not woken by the release")
	}
	took := time.Since(start)
	require.NoError(t, r.err)
	require.True(t, r.afterRelease, "the waiter returned before the release")
	require.Greater(t, r.l.Token(), hl.Token())
	require.Less(t, took, 5*time.Second)
	ev.Mu().Lock()
	wakes := append([]string(nil), ev.Wakes...)
	ev.Mu().Unlock()
	require.Equal(t, []string{"reconnect", "notify"}, wakes, "woken by NOTIFY")
	t.Logf("release → waiter acquired in %s; wakes %v", took, wakes)
}

// TestAcquireWaitWakesAtHolderExpiry: with no release (the holder simply
// stops renewing), the waiter wakes at the holder's expiry, converted from
// the database's remaining time to a local timer — not by the poll.
func TestAcquireWaitWakesAtHolderExpiry(t *testing.T) {
	e := newEnv(t)
	w, ev := observed(t, e, lease.Config{WaitPoll: time.Hour})
	k := uniqueKey(t)
	// A holder that will never renew: a row written directly, 800ms left.
	_, err := e.raw.Exec(bg(), fmt.Sprintf(`INSERT INTO %q.fencekit_leases (account_id, session_id, run_id, fence_token, acquired_at, renewed_at, expires_at)
		VALUES ($1, $2, $3, nextval('%q.fencekit_token_seq'), clock_timestamp(), clock_timestamp(), clock_timestamp() + interval '800 milliseconds')`, e.schema, e.schema),
		k.AccountID, k.SessionID, uuid.New())
	require.NoError(t, err)
	start := time.Now()
	l, err := w.AcquireWait(bg(), k)
	require.NoError(t, err)
	took := time.Since(start)
	require.GreaterOrEqual(t, took, 500*time.Millisecond, "acquired before the holder expired")
	require.Less(t, took, 5*time.Second)
	require.NoError(t, l.Err())
	ev.Mu().Lock()
	wakes := append([]string(nil), ev.Wakes...)
	ev.Mu().Unlock()
	require.Contains(t, wakes, "expiry")
	require.NotContains(t, wakes, "poll")
}

// TestAcquireWaitContextAndClose: a waiter returns the ctx's cause when ctx
// ends, and ErrClosed when its Manager closes.
func TestAcquireWaitContextAndClose(t *testing.T) {
	e := newEnv(t)
	holder := e.manager(lease.Config{TTL: time.Minute})
	w, ev := observed(t, e, lease.Config{WaitPoll: time.Hour})
	k := uniqueKey(t)
	_, err := holder.Acquire(bg(), k)
	require.NoError(t, err)

	stopped := errors.New("user gave up")
	ctx, cancel := context.WithCancelCause(bg())
	out := startWait(t, w, ev, ctx, k, nil, true)
	cancel(stopped)
	r := <-out
	require.ErrorIs(t, r.err, stopped)

	out = startWait(t, w, ev, bg(), k, nil, false)
	require.NoError(t, w.Close())
	r = <-out
	require.ErrorIs(t, r.err, lease.ErrClosed)
	_, err = w.AcquireWait(bg(), k)
	require.ErrorIs(t, err, lease.ErrClosed)
}

// TestAcquireWaitListenerReconnects: the waiter's LISTEN connection is cut;
// the listener reconnects (waiters re-check on reconnect) and a later
// release still wakes the waiter by NOTIFY.
func TestAcquireWaitListenerReconnects(t *testing.T) {
	e := newEnv(t)
	pool, proxy := proxiedPool(t)
	defer proxy.Restore()
	holder := e.manager(lease.Config{TTL: time.Minute})
	w, ev := observed(t, e, lease.Config{Pool: pool, WaitPoll: time.Hour})
	k := uniqueKey(t)
	hl, err := holder.Acquire(bg(), k)
	require.NoError(t, err)
	out := startWait(t, w, ev, bg(), k, nil, true)
	require.True(t, <-ev.Listener(), "listener connected")

	proxy.CloseConns()
	select {
	case up := <-ev.Listener():
		require.False(t, up, "listener lost")
	case <-time.After(10 * time.Second):
		t.Fatal("listener did not notice the cut")
	}
	// Reconnect attempts may fail first (the pool's idle connections were
	// cut too); wait for the one that succeeds.
	for up := false; !up; {
		select {
		case up = <-ev.Listener():
		case <-time.After(10 * time.Second):
			t.Fatal("listener did not reconnect")
		}
	}
	// The reconnect wakes the waiter for a re-check; wait until it sleeps again.
	expectWoken(t, ev, "reconnect")
	expectWaiting(t, ev, k, out)
	// The re-check may fail on a pool connection the cut killed; the waiter
	// then retries after a short backoff (an "expiry" wake) that could race
	// the release's NOTIFY. Wait until it sleeps after a refusal as held.
	for !ev.LastHeld() {
		expectWoken(t, ev, "expiry")
		expectWaiting(t, ev, k, out)
	}
	ev.Mu().Lock()
	before := len(ev.Wakes)
	ev.Mu().Unlock()
	_, err = hl.Release(bg())
	require.NoError(t, err)
	select {
	case r := <-out:
		require.NoError(t, r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not woken after the listener reconnected")
	}
	ev.Mu().Lock()
	wakes := append([]string(nil), ev.Wakes...)
	ev.Mu().Unlock()
	require.Equal(t, []string{"notify"}, wakes[before:], "wakes: %v", wakes)
	require.Equal(t, []string{"reconnect", "reconnect"}, wakes[:2], "wakes: %v", wakes)
}

// TestAcquireWaitListenerDetectsSilentPartition: with the LISTEN connection
// blackholed (no error ever comes back), the listener's bounded health
// check notices within about WaitPoll + CallTimeout and reconnects after
// the partition heals; the waiter then still acquires on release.
func TestAcquireWaitListenerDetectsSilentPartition(t *testing.T) {
	e := newEnv(t)
	pool, proxy := proxiedPool(t)
	holder := e.manager(lease.Config{TTL: time.Minute})
	w, ev := observed(t, e, lease.Config{Pool: pool, WaitPoll: 300 * time.Millisecond, CallTimeout: 300 * time.Millisecond})
	defer proxy.Restore()
	k := uniqueKey(t)
	hl, err := holder.Acquire(bg(), k)
	require.NoError(t, err)
	out := startWait(t, w, ev, bg(), k, nil, true)
	require.True(t, <-ev.Listener(), "listener connected")

	proxy.Blackhole()
	start := time.Now()
	select {
	case up := <-ev.Listener():
		require.False(t, up)
	case <-time.After(10 * time.Second):
		t.Fatal("listener did not notice the silent partition")
	}
	took := time.Since(start)
	require.Less(t, took, 3*time.Second, "noticed after %s", took)
	proxy.Restore()
	proxy.CloseConns()
	for up := false; !up; {
		select {
		case up = <-ev.Listener():
		case <-time.After(15 * time.Second):
			t.Fatal("listener did not reconnect after the partition healed")
		}
	}
	_, err = hl.Release(bg())
	require.NoError(t, err)
	select {
	case r := <-out:
		require.NoError(t, r.err)
		require.Greater(t, r.l.Token(), hl.Token())
	case <-time.After(10 * time.Second):
		t.Fatal("waiter did not acquire after the release")
	}
	t.Logf("silent partition of the LISTEN connection noticed after %s", took)
}

// TestAcquireWaitWakesOneWaiterPerRelease: three waiters of one key in one
// Manager. Each release wakes exactly one of them (no thundering herd), and
// the chain of acquire → release hands the lease to every waiter in turn.
// With every waiter woken per release the count would be 3+2+1 = 6.
func TestAcquireWaitWakesOneWaiterPerRelease(t *testing.T) {
	e := newEnv(t)
	holder := e.manager(lease.Config{TTL: time.Minute})
	w, ev := observed(t, e, lease.Config{TTL: time.Minute, WaitPoll: time.Hour})
	k := uniqueKey(t)
	hl, err := holder.Acquire(bg(), k)
	require.NoError(t, err)

	const n = 3
	out := make(chan waitResult, n)
	waiters := make([]<-chan waitResult, 0, n)
	for i := 0; i < n; i++ {
		c := startWait(t, w, ev, bg(), k, nil, i == 0)
		waiters = append(waiters, c)
	}
	for _, c := range waiters {
		go func() {
			r := <-c
			if r.err == nil {
				// Release at once: the next waiter must be woken by
				// this release's NOTIFY.
				_, r.err = r.l.Release(bg())
			}
			out <- r
		}()
	}
	_, err = hl.Release(bg())
	require.NoError(t, err)

	tokens := map[int64]bool{}
	for i := 0; i < n; i++ {
		select {
		case r := <-out:
			require.NoError(t, r.err)
			require.Greater(t, r.l.Token(), hl.Token())
			tokens[int64(r.l.Token())] = true
		case <-time.After(20 * time.Second):
			t.Fatalf("only %d of %d waiters acquired", i, n)
		}
	}
	require.Len(t, tokens, n, "each waiter held its own grant")
	ev.Mu().Lock()
	wakes := append([]string(nil), ev.Wakes...)
	ev.Mu().Unlock()
	notifies := 0
	for _, r := range wakes {
		if r == "notify" {
			notifies++
		}
	}
	require.Equal(t, n, notifies, "one NOTIFY wake per release; wakes %v", wakes)
}

// TestReleaseNotifiesOnlyContendedKeys: a release of a key nobody waited
// for sends no NOTIFY (the lease cycle's main cost, docs/performance.md);
// once a waiter has marked the key, its releases do. Absence is shown
// without timing: a sentinel NOTIFY sent after the release committed is
// delivered in commit order, so if it arrives first, the release sent none.
func TestReleaseNotifiesOnlyContendedKeys(t *testing.T) {
	e := newEnv(t)
	m := e.manager(lease.Config{TTL: time.Minute})
	channel := lease.ReleaseChannel(e.schema)
	conn, err := e.raw.Acquire(bg())
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(bg(), "SELECT set_config('fencekit.test', 'x', false)") // warm the conn
	require.NoError(t, err)
	_, err = conn.Exec(bg(), `LISTEN "`+channel+`"`)
	require.NoError(t, err)
	next := func() string {
		ctx, cancel := context.WithTimeout(bg(), 10*time.Second)
		defer cancel()
		n, err := conn.Conn().WaitForNotification(ctx)
		require.NoError(t, err)
		return n.Payload
	}
	sentinel := func(tag string) {
		_, err := e.raw.Exec(bg(), "SELECT pg_notify($1, $2)", channel, tag)
		require.NoError(t, err)
	}

	k := uniqueKey(t)
	l, err := m.Acquire(bg(), k)
	require.NoError(t, err)
	_, err = l.Release(bg())
	require.NoError(t, err)
	sentinel("after-uncontended")
	require.Equal(t, "after-uncontended", next(), "an uncontended release sent a NOTIFY")

	// A waiter marks the key; the release now notifies, before the sentinel.
	l, err = m.Acquire(bg(), k)
	require.NoError(t, err)
	w, ev := observed(t, e, lease.Config{WaitPoll: time.Hour})
	out := startWait(t, w, ev, bg(), k, nil, true)
	_, err = l.Release(bg())
	require.NoError(t, err)
	sentinel("after-contended")
	first := next()
	require.NotEqual(t, "after-contended", first, "a contended release sent no NOTIFY")
	require.Equal(t, "after-contended", next())
	r := <-out
	require.NoError(t, r.err)
	require.Greater(t, r.l.Token(), l.Token())
}
