package lease_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/internal/netproxy"
	"github.com/fencekit/fencekit/lease"
)

// proxiedPool returns a pool whose connections go through a fault proxy to
// the test database.
func proxiedPool(t *testing.T) (*pgxpool.Pool, *netproxy.Proxy) {
	t.Helper()
	return proxiedPoolWith(t, nil)
}

func proxiedPoolWith(t *testing.T, configure func(*pgxpool.Config)) (*pgxpool.Pool, *netproxy.Proxy) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(fencetest.DatabaseURL())
	require.NoError(t, err)
	p, err := netproxy.New(net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() }) // runs after the pool's cleanup (LIFO)
	pool := fencetest.PoolWith(t, fencetest.DatabaseURL(), func(c *pgxpool.Config) {
		c.ConnConfig.Host, c.ConnConfig.Port = p.Host(), p.Port()
		c.ConnConfig.ConnectTimeout = 2 * time.Second
		if configure != nil {
			configure(c)
		}
	})
	return pool, p
}

// TestUnrelatedKeysDoNotInterfere: holding one key never blocks, renews or
// releases another, including keys that share an account or a session id
// and keys whose concatenations collide.
func TestUnrelatedKeysDoNotInterfere(t *testing.T) {
	e := newEnv(t)
	a, b := e.manager(lease.Config{}), e.manager(lease.Config{})
	acct := uuid.NewString()
	k1 := lease.Key{AccountID: acct, SessionID: "s1"}
	related := []lease.Key{
		{AccountID: acct, SessionID: "s2"},        // same account
		{AccountID: acct + "-x", SessionID: "s1"}, // same session id
		{AccountID: acct + "s", SessionID: "1"},   // account+session concatenation collides
	}
	l1, err := a.Acquire(bg(), k1)
	require.NoError(t, err)
	var others []*lease.Lease
	for _, k := range related {
		l, err := b.Acquire(bg(), k)
		require.NoError(t, err, "key %s", k)
		require.NotEqual(t, l1.Token(), l.Token())
		others = append(others, l)
	}
	// Releasing and renewing k1 leaves the others untouched.
	before := map[lease.Key]row{}
	for _, k := range related {
		before[k], _ = e.row(k)
	}
	_, err = a.Renew(bg(), k1, l1.RunID())
	require.NoError(t, err)
	res, err := l1.Release(bg())
	require.NoError(t, err)
	require.Equal(t, lease.ReleaseDone, res)
	for _, k := range related {
		after, _ := e.row(k)
		require.Equal(t, before[k], after, "key %s changed", k)
	}
	// The others' run_ids do not act on k1, nor k1's on them.
	_, err = b.Renew(bg(), k1, others[0].RunID())
	require.ErrorIs(t, err, lease.ErrLost)
	rr, err := a.Release(bg(), related[0], l1.RunID())
	require.NoError(t, err)
	require.Equal(t, lease.ReleaseNotHolder, rr)
	for _, l := range others {
		require.NoError(t, l.Err(), "lease %s", l)
		st, err := b.Inspect(bg(), l.Key())
		require.NoError(t, err)
		require.Equal(t, lease.StateHeld, st.State)
		require.Equal(t, l.RunID(), st.RunID)
	}
}

// TestHeldRejectionReportsHolder: acquiring a valid lease fails with a
// *HeldError naming the holder, its token and expiry, and changes nothing.
func TestHeldRejectionReportsHolder(t *testing.T) {
	e := newEnv(t)
	a, b := e.manager(lease.Config{TTL: 30 * time.Second}), e.manager(lease.Config{})
	k := uniqueKey(t)
	l, err := a.Acquire(bg(), k)
	require.NoError(t, err)
	before, _ := e.row(k)

	_, err = b.Acquire(bg(), k)
	require.ErrorIs(t, err, lease.ErrHeld)
	he, ok := isHeld(err)
	require.True(t, ok)
	require.Equal(t, k, he.Key)
	require.Equal(t, l.RunID(), he.RunID)
	require.Equal(t, l.Token(), he.Token)
	require.WithinDuration(t, before.ExpiresAt, he.ExpiresAt, 0)
	require.Greater(t, he.Remaining, 25*time.Second)
	require.LessOrEqual(t, he.Remaining, 30*time.Second)
	require.Contains(t, he.Error(), l.RunID().String())

	after, _ := e.row(k)
	require.Equal(t, before, after, "a refused acquire changes nothing")
	require.NoError(t, l.Err())
}

// TestTokenIncreasesAcrossReleaseReacquire: per key, every later grant has
// a larger token, across release/re-acquire by different Managers and with
// other keys drawing from the same sequence in between.
func TestTokenIncreasesAcrossReleaseReacquire(t *testing.T) {
	e := newEnv(t)
	ms := []*lease.Manager{e.manager(lease.Config{}), e.manager(lease.Config{}), e.manager(lease.Config{})}
	k, other := uniqueKey(t), uniqueKey(t)
	var last fence.Token
	for i := range 60 {
		m := ms[i%len(ms)]
		l, err := m.Acquire(bg(), k)
		require.NoError(t, err)
		require.Greater(t, l.Token(), last, "grant %d", i)
		last = l.Token()
		if i%3 == 0 {
			lo, err := ms[(i+1)%len(ms)].Acquire(bg(), other)
			require.NoError(t, err)
			_, err = lo.Release(bg())
			require.NoError(t, err)
		}
		if i%2 == 0 {
			_, err = l.Release(bg())
			require.NoError(t, err)
		} else {
			// Takeover after expiry rather than release.
			e.expire(k)
		}
		r, ok := e.row(k)
		require.True(t, ok, "the row is kept after release")
		require.Equal(t, int64(l.Token()), r.Token)
	}
}

// TestTokenDrawnUnderRowLockAfterStall reproduces the stalled-draw hazard (docs/lease.md, "Token order"): an
// acquire statement draws its VALUES-side nextval() and then stalls on the
// key's row (an uncommitted insert by another connection); meanwhile that
// connection records a grant with a later token that is then released.
// When the stalled statement proceeds it must be granted a token larger
// than that grant's, not the smaller value it drew first.
func TestTokenDrawnUnderRowLockAfterStall(t *testing.T) {
	e := newEnv(t)
	m := e.manager(lease.Config{TTL: time.Minute, CallTimeout: 20 * time.Second})
	k := uniqueKey(t)
	q := func(s string) string { return fmt.Sprintf(s, e.schema, e.schema) }

	// The "other run": an uncommitted insert of the key's row.
	tx, err := e.raw.Begin(bg())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(bg()) }()
	_, err = tx.Exec(bg(), q(`INSERT INTO %q.fencekit_leases (account_id, session_id, run_id, fence_token, acquired_at, renewed_at, expires_at)
		VALUES ($1, $2, $3, nextval('%q.fencekit_token_seq'), clock_timestamp(), clock_timestamp(), clock_timestamp() + interval '1 minute')`),
		k.AccountID, k.SessionID, uuid.New())
	require.NoError(t, err)
	var firstDraw int64
	require.NoError(t, tx.QueryRow(bg(), fmt.Sprintf(`SELECT fence_token FROM %q.fencekit_leases WHERE account_id=$1 AND session_id=$2`, e.schema),
		k.AccountID, k.SessionID).Scan(&firstDraw))

	type out struct {
		l   *lease.Lease
		err error
	}
	done := make(chan out, 1)
	go func() {
		l, err := m.Acquire(bg(), k)
		done <- out{l, err}
	}()
	// Wait until the acquire statement is blocked on the row (it has drawn
	// its VALUES-side token by then).
	waitFor(t, 10*time.Second, "acquire blocked on the row lock", func() bool {
		var n int
		// pg_stat_activity keeps the first track_activity_query_size bytes
		// (1024 by default) of the statement (with the values inlined, in
		// the simple protocol): match its beginning only.
		require.NoError(t, e.raw.QueryRow(bg(), `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO "' || $1 || '".fencekit_leases %'`,
			e.schema).Scan(&n))
		return n > 0
	})
	stalledDrew, called := e.seq()
	require.True(t, called)
	require.Greater(t, stalledDrew, firstDraw, "the stalled statement has drawn its VALUES-side value")

	// Meanwhile the other run's grant gets a later token, and is released.
	var granted int64
	require.NoError(t, tx.QueryRow(bg(), q(`UPDATE %q.fencekit_leases SET fence_token = nextval('%q.fencekit_token_seq'),
		released_at = clock_timestamp() - interval '1 hour', expires_at = clock_timestamp() - interval '1 hour'
		WHERE account_id=$1 AND session_id=$2 RETURNING fence_token`), k.AccountID, k.SessionID).Scan(&granted))
	require.Greater(t, granted, stalledDrew)
	require.NoError(t, tx.Commit(bg()))

	res := <-done
	require.NoError(t, res.err)
	require.Greater(t, int64(res.l.Token()), granted,
		"stalled acquire must be granted a token above the grant committed while it waited (it drew %d first)", stalledDrew)
	t.Logf("stalled statement drew %d, the other run was granted %d meanwhile, the stalled run was granted %d", stalledDrew, granted, res.l.Token())
}

// TestAuthorizationDenialLeavesNoTrace: a refused caller sends no statement:
// no row, no token drawn, for Acquire, AcquireWait and Run.
func TestAuthorizationDenialLeavesNoTrace(t *testing.T) {
	e := newEnv(t)
	deny := errors.New("account suspended")
	var calls atomic.Int32
	m := e.manager(lease.Config{Authorizer: lease.AuthorizerFunc(func(_ context.Context, k lease.Key) error {
		calls.Add(1)
		if k.AccountID == "denied" {
			return deny
		}
		return nil
	})})
	seqBefore, calledBefore := e.seq()
	k := lease.Key{AccountID: "denied", SessionID: "s"}
	_, err := m.Acquire(bg(), k)
	require.ErrorIs(t, err, lease.ErrUnauthorized)
	require.ErrorIs(t, err, deny)
	_, err = m.AcquireWait(bg(), k)
	require.ErrorIs(t, err, lease.ErrUnauthorized)
	ran := false
	err = m.Run(bg(), k, func(context.Context, *lease.Lease) error { ran = true; return nil })
	require.ErrorIs(t, err, lease.ErrUnauthorized)
	require.False(t, ran)
	require.EqualValues(t, 3, calls.Load())

	require.Equal(t, 0, e.rowCount(), "no row written")
	seqAfter, calledAfter := e.seq()
	require.Equal(t, seqBefore, seqAfter, "no token drawn")
	require.Equal(t, calledBefore, calledAfter)

	// An allowed key still works through the same Manager.
	l, err := m.Acquire(bg(), lease.Key{AccountID: "ok", SessionID: "s"})
	require.NoError(t, err)
	require.True(t, l.Token().Valid())
}

// TestExpiredTakeoverAndLateOpsChangeNothing: the old owner's Manager is
// partitioned (blackholed proxy) and stops renewing; after the database
// says the lease expired another Manager takes over with a larger token;
// when the partition heals, the old owner's late renew and late release
// are refused and the row is unchanged.
func TestExpiredTakeoverAndLateOpsChangeNothing(t *testing.T) {
	e := newEnv(t)
	pool, proxy := proxiedPool(t)
	old := e.manager(lease.Config{Pool: pool, TTL: 600 * time.Millisecond, SafetyMargin: 150 * time.Millisecond,
		RenewEvery: 150 * time.Millisecond, CallTimeout: 250 * time.Millisecond})
	next := e.manager(lease.Config{})
	k := uniqueKey(t)
	l, err := old.Acquire(bg(), k)
	require.NoError(t, err)

	proxy.Blackhole()
	<-l.Done() // by the trust deadline, without any reply
	require.ErrorIs(t, l.Err(), lease.ErrTrustExpired)
	waitFor(t, 10*time.Second, "database expiry", func() bool {
		st, err := next.Inspect(bg(), k)
		require.NoError(t, err)
		return st.State == lease.StateExpired
	})
	nl, err := next.Acquire(bg(), k)
	require.NoError(t, err)
	require.Greater(t, nl.Token(), l.Token())
	taken, _ := e.row(k)

	proxy.Restore()
	proxy.CloseConns() // drop connections that carried hung statements
	// The pool cannot know its idle connections were just closed under it;
	// without a reset the late renew below may draw one and fail with EOF
	// instead of reaching the database (seen under load in CI).
	pool.Reset()
	// A late statement must reach the database to be refused: one that
	// misses old's 250ms CallTimeout on a loaded machine (a new connection
	// to dial) is sent again.
	for range 5 {
		if _, err = old.Renew(bg(), k, l.RunID()); !errors.Is(err, context.DeadlineExceeded) {
			break
		}
	}
	require.ErrorIs(t, err, lease.ErrLost)
	require.ErrorIs(t, errOf(l.Renew(bg())), lease.ErrTrustExpired, "an ended Lease reports its cause")
	var res lease.ReleaseResult
	for range 5 {
		if res, err = old.Release(bg(), k, l.RunID()); !errors.Is(err, context.DeadlineExceeded) {
			break
		}
	}
	require.NoError(t, err)
	require.Equal(t, lease.ReleaseNotHolder, res)
	res, err = l.Release(bg())
	require.NoError(t, err)
	require.Equal(t, lease.ReleaseNotHolder, res)

	after, _ := e.row(k)
	require.Equal(t, taken, after, "late renew and release by the old owner changed the row")
	require.Equal(t, nl.RunID(), after.RunID)
	require.NoError(t, nl.Err())
}

// TestRenewalFailureCancelsByTrustDeadline: the database becomes
// unreachable (blackholed: no reply ever comes back, only local timeouts)
// and the lease context is cancelled no later than the trust deadline, with
// ErrTrustExpired.
func TestRenewalFailureCancelsByTrustDeadline(t *testing.T) {
	e := newEnv(t)
	pool, proxy := proxiedPool(t)
	m, ev, err := lease.NewObserved(lease.Config{Pool: pool, Schema: e.schema, TTL: time.Second,
		SafetyMargin: 200 * time.Millisecond, RenewEvery: 250 * time.Millisecond, CallTimeout: 500 * time.Millisecond})
	require.NoError(t, err)
	defer m.Close()
	defer proxy.Restore()
	k := uniqueKey(t)
	l, err := m.Acquire(bg(), k)
	require.NoError(t, err)
	// Let at least one background renewal succeed first.
	first := l.TrustDeadline()
	waitFor(t, 5*time.Second, "a background renewal", func() bool { return l.TrustDeadline().After(first) })

	proxy.Blackhole()
	// No reply comes back: the renewals only time out (CallTimeout 500ms),
	// and only the local timer ends the lease, on time.
	var deadline time.Time
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("lease context not cancelled after the database became unreachable")
	}
	at := time.Now()
	deadline = l.TrustDeadline()
	require.ErrorIs(t, context.Cause(l.Context()), lease.ErrTrustExpired)
	require.False(t, at.Before(deadline), "cancelled before the trust deadline")
	const slack = 250 * time.Millisecond // timer scheduling under -race on a busy 2-core machine
	require.LessOrEqual(t, at.Sub(deadline), slack, "cancelled %s after the trust deadline", at.Sub(deadline))
	t.Logf("cancelled %s after the trust deadline", at.Sub(deadline))
	require.Equal(t, time.Duration(0), l.Remaining())
	waitFor(t, 5*time.Second, "the observer to see the loss", func() bool {
		_, _, lost := ev.Snapshot()
		return len(lost) == 1 && lost[0] == k
	})
}

// TestRenewalRejectedCancelsWithErrLost: when the database refuses a
// background renewal (another run took the row), exactly that lease is
// cancelled with ErrLost; the Manager's other leases stay held.
func TestRenewalRejectedCancelsWithErrLost(t *testing.T) {
	e := newEnv(t)
	m := e.manager(lease.Config{TTL: time.Second, RenewEvery: 200 * time.Millisecond})
	k1, k2 := uniqueKey(t), uniqueKey(t)
	l1, err := m.Acquire(bg(), k1)
	require.NoError(t, err)
	l2, err := m.Acquire(bg(), k2)
	require.NoError(t, err)
	e.replaceRun(k1)
	select {
	case <-l1.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("rejected renewal did not cancel the lease")
	}
	require.ErrorIs(t, l1.Err(), lease.ErrLost)
	require.Less(t, time.Now(), l1.TrustDeadline().Add(time.Second))
	// l2 keeps being renewed well past its first trust deadline.
	firstDeadline := l2.TrustDeadline()
	waitFor(t, 5*time.Second, "l2 renewed past its first deadline", func() bool { return time.Now().After(firstDeadline.Add(100 * time.Millisecond)) })
	require.NoError(t, l2.Err())
	require.True(t, l2.TrustDeadline().After(firstDeadline))
}

// TestBatchedRenewal: one Manager holding 2,500 leases in per-lease mode
// renews them in statements of at most 1,000 leases (3 per round), and all
// stay held.
func TestBatchedRenewal(t *testing.T) {
	e := newEnv(t)
	m, ev, err := lease.NewObserved(lease.Config{Pool: fencetest.Pool(t), Schema: e.schema, TTL: 6 * time.Second, RenewEvery: time.Second,
		Renewal: lease.RenewalPerLease}) // batched per-lease renewal; TestHeartbeatManyLeasesOneStatement is the heartbeat's

	require.NoError(t, err)
	defer m.Close()
	const n = 2500
	acct := uuid.NewString()
	leases := make([]*lease.Lease, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var wg sync.WaitGroup
	var fail atomic.Value
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				l, err := m.Acquire(bg(), lease.Key{AccountID: acct, SessionID: strconv.Itoa(i)})
				if err != nil {
					fail.Store(err)
					return
				}
				leases[i] = l
			}
		}()
	}
	wg.Wait()
	if err, _ := fail.Load().(error); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	// Informational (targets live in benchmarks): live heap per held lease,
	// including the Manager's bookkeeping and its pool's growth.
	t.Logf("heap per held lease ≈ %d bytes", (int64(after.HeapAlloc)-int64(before.HeapAlloc))/n)
	// Steady state: count the statements that renew the next n leases.
	seen, _, _ := ev.Snapshot()
	var stmts []int
	waitFor(t, 15*time.Second, "every lease renewed once more", func() bool {
		all, _, _ := ev.Snapshot()
		stmts = all[len(seen):]
		total := 0
		for _, s := range stmts {
			total += s
		}
		return total >= n
	})
	for _, s := range stmts {
		require.LessOrEqual(t, s, lease.MaxBatch)
	}
	require.LessOrEqual(t, len(stmts), 8, "renewing %d leases took statements of sizes %v", n, stmts)
	for _, l := range leases {
		require.NoError(t, l.Err())
	}
	t.Logf("%d leases renewed by %d statements of sizes %v", n, len(stmts), stmts)
	// Close releases all of them in batched statements.
	require.NoError(t, m.Close())
	var held int
	require.NoError(t, e.raw.QueryRow(bg(), fmt.Sprintf(`SELECT count(*) FROM %q.fencekit_leases WHERE released_at IS NULL`, e.schema)).Scan(&held))
	require.Equal(t, 0, held)
}

// TestCallTimeoutBoundsLockedRow: a row locked by someone else cannot hang
// Acquire, Renew, Release or Inspect beyond CallTimeout.
func TestCallTimeoutBoundsLockedRow(t *testing.T) {
	e := newEnv(t)
	const bound = 300 * time.Millisecond
	m := e.manager(lease.Config{CallTimeout: bound})
	k := uniqueKey(t)
	l, err := m.Acquire(bg(), k)
	require.NoError(t, err)
	tx, err := e.raw.Begin(bg())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(bg()) }()
	_, err = tx.Exec(bg(), fmt.Sprintf(`SELECT 1 FROM %q.fencekit_leases WHERE account_id=$1 AND session_id=$2 FOR UPDATE`, e.schema), k.AccountID, k.SessionID)
	require.NoError(t, err)

	check := func(name string, f func() error) {
		start := time.Now()
		err := f()
		took := time.Since(start)
		require.Error(t, err, name)
		require.ErrorIs(t, err, context.DeadlineExceeded, name)
		require.Less(t, took, bound+time.Second, "%s took %s", name, took)
	}
	check("Acquire", func() error { _, err := m.Acquire(bg(), k); return err })
	check("Renew", func() error { _, err := m.Renew(bg(), k, l.RunID()); return err })
	check("Release", func() error { _, err := m.Release(bg(), k, l.RunID()); return err })
	require.NoError(t, tx.Rollback(bg()))
	st, err := m.Inspect(bg(), k) // a plain read does not wait on row locks
	require.NoError(t, err)
	require.Equal(t, l.RunID(), st.RunID)
}

// TestRenewalErrorsLeaveLeaseToTrustTimer: with the connection refused
// (errors come back at once), failed renewals neither end the lease early
// nor keep it past its trust deadline.
func TestRenewalErrorsLeaveLeaseToTrustTimer(t *testing.T) {
	e := newEnv(t)
	pool, proxy := proxiedPool(t)
	m, ev, err := lease.NewObserved(lease.Config{Pool: pool, Schema: e.schema, TTL: time.Second,
		SafetyMargin: 200 * time.Millisecond, RenewEvery: 200 * time.Millisecond, CallTimeout: 500 * time.Millisecond})
	require.NoError(t, err)
	defer m.Close()
	defer proxy.Restore()
	l, err := m.Acquire(bg(), uniqueKey(t))
	require.NoError(t, err)
	proxy.Cut()
	cutAt := time.Now()
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("lease not cancelled")
	}
	at := time.Now()
	require.ErrorIs(t, l.Err(), lease.ErrTrustExpired)
	require.False(t, at.Before(l.TrustDeadline()), "ended before its trust deadline")
	require.LessOrEqual(t, at.Sub(l.TrustDeadline()), 250*time.Millisecond)
	require.LessOrEqual(t, l.TrustDeadline().Sub(cutAt), 800*time.Millisecond, "no renewal succeeded after the cut")
	_, failed, _ := ev.Snapshot()
	require.Positive(t, failed, "renewal statements were attempted and failed")
}
