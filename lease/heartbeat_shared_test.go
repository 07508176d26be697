package lease_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/internal/netproxy"
	"github.com/fencekit/fencekit/internal/obs/obstest"
	"github.com/fencekit/fencekit/lease"
)

// TestHeartbeatCancelledCallerFailsNothing: a Renew (and an Acquire) whose
// ctx is already cancelled neither marks the heartbeat failed nor logs a
// failed renewal: the heartbeat runs on the Manager's own context, and the
// caller only stops waiting for it.
func TestHeartbeatCancelledCallerFailsNothing(t *testing.T) {
	e := newEnv(t)
	logs, logger := obstest.NewLogs()
	m := e.manager(heartbeat(lease.Config{TTL: 10 * time.Second, RenewEvery: 4 * time.Second, Logger: logger}))
	l, err := m.Acquire(bg(), uniqueKey(t))
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(bg())
	cancel()
	_, err = l.Renew(ctx)
	require.ErrorIs(t, err, context.Canceled)
	// The heartbeat the cancelled call asked for completes on its own.
	r, err := l.Renew(bg())
	require.NoError(t, err)
	require.True(t, r.TrustDeadline.After(time.Now()))
	require.False(t, lease.HeartbeatFailed(m), "a cancelled caller marked the heartbeat failed")
	require.Empty(t, logs.AtLeast(slog.LevelWarn), "a cancelled caller logged a failed renewal")
	require.NoError(t, l.Err())
}

// TestHeartbeatConcurrentRenewsShareOneBeat: Renew calls made while a
// heartbeat statement is in flight wait for that statement instead of each
// sending one of their own.
func TestHeartbeatConcurrentRenewsShareOneBeat(t *testing.T) {
	e := newEnv(t)
	m, ev, err := lease.NewObserved(heartbeat(lease.Config{Pool: fencetest.Pool(t), Schema: e.schema,
		TTL: 20 * time.Second, RenewEvery: 8 * time.Second, CallTimeout: 5 * time.Second}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	ls := acquireN(t, m, 8)
	before, _, _ := ev.Snapshot()

	// Hold the heartbeat row so that the first beat waits on its lock.
	tx, err := e.raw.Begin(bg())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(bg()) }()
	_, err = tx.Exec(bg(), fmt.Sprintf(`SELECT 1 FROM %q.fencekit_managers WHERE manager_id = $1 FOR UPDATE`, e.schema), lease.EpochOf(m))
	require.NoError(t, err)

	var wg sync.WaitGroup
	errs := make([]error, len(ls))
	for i, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = l.Renew(bg())
		}()
	}
	// Every Renew is waiting: at most one heartbeat statement is blocked
	// on the row, the others wait in the client.
	waitFor(t, 5*time.Second, "a heartbeat blocked on the row lock", func() bool {
		var n int
		require.NoError(t, e.raw.QueryRow(bg(), `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%fencekit_managers%'`).Scan(&n))
		return n > 0
	})
	time.Sleep(200 * time.Millisecond) // let every goroutine reach its Renew
	require.NoError(t, tx.Rollback(bg()))
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	after, _, _ := ev.Snapshot()
	beats := len(after) - len(before)
	require.LessOrEqual(t, beats, 2, "8 concurrent Renew calls sent %d heartbeat statements", beats)
}

// TestHeartbeatUnparsableRunIsReported: a run id in the heartbeat's reply
// that does not parse fails the beat (reported, the reply not trusted),
// even when valid rows follow it.
func TestHeartbeatUnparsableRunIsReported(t *testing.T) {
	e := newEnv(t)
	m, ev, err := lease.NewObserved(heartbeat(lease.Config{Pool: fencetest.Pool(t), Schema: e.schema,
		TTL: 20 * time.Second, RenewEvery: 8 * time.Second}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	l, err := m.Acquire(bg(), uniqueKey(t))
	require.NoError(t, err)
	// The real statement, then a run id that is not one, then a valid one.
	lease.SetBeatSQL(m, lease.BeatSQL(m)+`
UNION ALL SELECT NULL, NULL, 'not-a-run-id', 'taken'
UNION ALL SELECT NULL, NULL, '`+l.RunID().String()+`', 'revoked'`)
	_, failedBefore, _ := ev.Snapshot()
	_, err = l.Renew(bg())
	require.Error(t, err)
	require.ErrorContains(t, err, "not-a-run-id")
	_, failedAfter, _ := ev.Snapshot()
	require.Equal(t, failedBefore+1, failedAfter, "the beat counts as failed")
	require.True(t, lease.HeartbeatFailed(m))
}

// TestHeartbeatBeatReadsOwnRecordsOnly: a neighbour Manager's takeovers,
// by this release and by the previous one (records without an epoch), do
// not grow what another Manager's heartbeat statement reads or returns;
// the Manager's own lease displaced by a previous-release takeover still
// ends with ErrTakenOver at its next beat.
func TestHeartbeatBeatReadsOwnRecordsOnly(t *testing.T) {
	e := newEnv(t)
	ttl := 5 * time.Second
	me := e.manager(heartbeat(lease.Config{TTL: ttl, RenewEvery: time.Second}))
	nb := e.manager(heartbeat(lease.Config{TTL: ttl}))
	mine := acquireN(t, me, 3)
	old := newOldManager(t, e.schema, ttl)
	old.channel = "fencekit_muted_for_test"
	k := uniqueKey(t)
	const storm = 300
	for range storm {
		_, err := nb.Takeover(bg(), k) // records with the neighbour's epoch
		require.NoError(t, err)
		ol, err := old.grant(bg(), k, true) // records without an epoch
		require.NoError(t, err)
		_ = ol
	}
	explain := func() (rows, buffers int) {
		t.Helper()
		var plan string
		require.NoError(t, e.raw.QueryRow(bg(), "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+lease.BeatSQL(me),
			lease.EpochOf(me), ttl.Microseconds(), int64(time.Second/time.Microsecond), time.Now().Add(-time.Minute)).Scan(&plan))
		return planTotals(t, plan)
	}
	rows, buffers := explain()
	t.Logf("after %d neighbour takeovers of each release: beat returns %d rows, %d buffers", storm, rows, buffers)
	require.LessOrEqual(t, rows, 3, "the beat returns the schema's takeovers")
	require.Less(t, buffers, 40, "the beat reads the schema's takeovers")

	// A previous-release takeover of one of this Manager's leases (its
	// notification muted) ends it at the next beat.
	_, err := old.grant(bg(), mine[0].Key(), true)
	require.NoError(t, err)
	require.ErrorIs(t, waitEnded(t, mine[0], 5*time.Second), lease.ErrTakenOver)
	require.NoError(t, mine[1].Err())
}

// TestTakeoverDuringGrantReplyEndsVictimAtOnce: a takeover that commits
// while its victim's Acquire reply is still in flight (its notification
// reaches the victim's Manager before the lease is registered) ends the
// victim as soon as its Acquire returns, not at its next heartbeat.
func TestTakeoverDuringGrantReplyEndsVictimAtOnce(t *testing.T) {
	e := newEnv(t)
	cfg, err := pgxpool.ParseConfig(fencetest.DatabaseURL())
	require.NoError(t, err)
	p, err := netproxy.New(net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Fallbacks = p.Host(), p.Port(), nil
	cfg.MaxConns = 1 // the warm-up prepares the acquire on the one connection the grant uses
	pool := fencetest.PoolFor(t, cfg)
	victim, ev, err := lease.NewObserved(heartbeat(lease.Config{Pool: pool, Schema: e.schema,
		TTL: 20 * time.Second, RenewEvery: 8 * time.Second, CallTimeout: 5 * time.Second,
		// The listener does not go through the proxy, and sends its next
		// delivery probe (through the pool's settings) after the test.
		WaitPoll: time.Minute, ListenConnString: fencetest.DatabaseURL()}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = victim.Close() })
	other := e.manager(heartbeat(lease.Config{TTL: 20 * time.Second}))

	_, err = victim.Acquire(bg(), uniqueKey(t)) // epoch, listener, prepared statement
	require.NoError(t, err)
	waitListener(t, ev, true)
	waitFor(t, 10*time.Second, "the listener's first probe", func() bool {
		return victim.Health(bg()).Listener == lease.ListenerDelivering
	})

	k := uniqueKey(t)
	p.Pause(netproxy.Downstream) // the grant's reply is held
	type result struct {
		l   *lease.Lease
		err error
	}
	res := make(chan result, 1)
	go func() {
		l, err := victim.Acquire(bg(), k)
		res <- result{l, err}
	}()
	waitFor(t, 5*time.Second, "the held grant to commit", func() bool { _, ok := e.row(k); return ok })
	taker, err := other.Takeover(bg(), k)
	require.NoError(t, err)
	time.Sleep(300 * time.Millisecond) // the notification reaches the victim's listener meanwhile
	p.Restore()
	var r result
	select {
	case r = <-res:
	case <-time.After(10 * time.Second):
		t.Fatal("the held Acquire did not return")
	}
	require.NoError(t, r.err)
	returned := time.Now()
	require.ErrorIs(t, waitEnded(t, r.l, 2*time.Second), lease.ErrTakenOver,
		"the victim learned of the takeover only from a later heartbeat")
	t.Logf("victim ended %s after its Acquire returned", lease.EndedAt(r.l).Sub(returned))
	require.NoError(t, taker.Err())
}

// planTotals reads the rows a statement returned and the shared buffers it
// touched (hit or read, its CTEs included) from EXPLAIN (ANALYZE, BUFFERS,
// FORMAT JSON).
func planTotals(t *testing.T, plan string) (rows, buffers int) {
	t.Helper()
	var p []struct {
		Plan struct {
			Rows int `json:"Actual Rows"`
			Hit  int `json:"Shared Hit Blocks"`
			Read int `json:"Shared Read Blocks"`
		} `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal([]byte(plan), &p))
	require.Len(t, p, 1)
	return p[0].Plan.Rows, p[0].Plan.Hit + p[0].Plan.Read
}

// TestTakeoverStormDisplacedToldAtOnce: Managers take a few keys over from
// each other many times (heartbeat mode), so that takeovers often land
// while the displaced grant's own reply is in flight. Every displaced
// holder ends with ErrTakenOver, told by the takeover's notification (or
// at its own grant's return), not by a later heartbeat: the delay from the
// takeover's return (or the displaced grant's, when that came later) to
// the end of the displaced lease is logged (p50, p99, max) and bounded by
// half the renewal period, which a holder told by its heartbeat exceeds
// half the time. The figures themselves depend on the machine's load.
func TestTakeoverStormDisplacedToldAtOnce(t *testing.T) {
	fencetest.SkipShort(t)
	e := newEnv(t)
	const managers, keys, rounds = 8, 4, 120
	renewEvery := 3 * time.Second
	ms := make([]*lease.Manager, managers)
	for i := range ms {
		ms[i] = e.manager(heartbeat(lease.Config{TTL: 10 * time.Second, RenewEvery: renewEvery}))
	}
	acct := uuid.NewString()
	key := func(i int) lease.Key { return lease.Key{AccountID: acct, SessionID: strconv.Itoa(i % keys)} }
	type grant struct {
		l        *lease.Lease
		returned time.Time
	}
	var (
		mu  sync.Mutex
		all []grant
		wg  sync.WaitGroup
	)
	errs := make(chan error, managers)
	for w, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				l, err := m.Takeover(bg(), key(w+i))
				if err != nil {
					errs <- err
					return
				}
				at := time.Now()
				mu.Lock()
				all = append(all, grant{l, at})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	byKey := map[lease.Key][]grant{}
	for _, g := range all {
		byKey[g.l.Key()] = append(byKey[g.l.Key()], g)
	}
	var delays, sinceTakeover []time.Duration
	for _, gs := range byKey {
		sort.Slice(gs, func(i, j int) bool { return gs[i].l.Token() < gs[j].l.Token() })
		for i, g := range gs[:len(gs)-1] {
			next := gs[i+1] // the takeover that displaced g
			require.ErrorIs(t, waitEnded(t, g.l, 10*time.Second), lease.ErrTakenOver)
			ended := lease.EndedAt(g.l)
			sinceTakeover = append(sinceTakeover, max(ended.Sub(next.returned), 0))
			delays = append(delays, max(min(ended.Sub(next.returned), ended.Sub(g.returned)), 0))
		}
		require.NoError(t, gs[len(gs)-1].l.Err(), "the last grant of a key holds")
	}
	q := func(ds []time.Duration, p float64) time.Duration {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[int(p*float64(len(ds)-1))]
	}
	t.Logf("%d displaced holders told after both grants returned: p50 %s, p99 %s, max %s; after the takeover returned: p50 %s, p99 %s, max %s",
		len(delays), q(delays, 0.5), q(delays, 0.99), q(delays, 1), q(sinceTakeover, 0.5), q(sinceTakeover, 0.99), q(sinceTakeover, 1))
	require.Less(t, q(delays, 1), renewEvery/2, "a displaced holder was told by a heartbeat, not at once")
}
