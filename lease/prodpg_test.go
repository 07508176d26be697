package lease_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/internal/obs/obstest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/internal/leasemetrics"
	"github.com/fencekit/fencekit/sql/migrations"
)

// otherDatabaseURL is the test database's URL pointing at the server's
// "postgres" database: a connection that answers every statement but never
// receives the test database's notifications (notifications do not cross
// databases), as a LISTEN behind a pooler in transaction mode does not.
func otherDatabaseURL(t *testing.T) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(fencetest.DatabaseURL())
	require.NoError(t, err)
	require.NotEqual(t, "postgres", cfg.Database, "the test database must not be the postgres database")
	return fmt.Sprintf("postgres://%s@%s:%d/postgres?sslmode=disable", cfg.User, cfg.Host, cfg.Port)
}

// waitHealth polls m.Health until cond holds.
func waitHealth(t *testing.T, m *lease.Manager, what string, cond func(lease.Health) bool) lease.Health {
	t.Helper()
	var h lease.Health
	waitFor(t, 15*time.Second, what, func() bool {
		h = m.Health(bg())
		return cond(h)
	})
	return h
}

// TestListenerVerifiesDelivery: once listening, the Manager's probe comes
// back: Health reports the listener delivering, no probe lost, Ready.
// The same holds with a dedicated ListenConnString.
func TestListenerVerifiesDelivery(t *testing.T) {
	e := newEnv(t)
	for _, dedicated := range []bool{false, true} {
		t.Run(fmt.Sprintf("dedicated=%v", dedicated), func(t *testing.T) {
			mt := obstest.NewMeter(t)
			cfg := lease.Config{MeterProvider: mt.Provider}
			if dedicated {
				cfg.ListenConnString = fencetest.DatabaseURL()
			}
			m := e.manager(cfg)
			h := m.Health(bg())
			require.Equal(t, lease.ListenerIdle, h.Listener, "no grant yet: no listener")
			require.True(t, h.Ready, "problems: %v", h.Problems)
			require.True(t, h.SchemaMigrated)
			_, err := m.Acquire(bg(), uniqueKey(t))
			require.NoError(t, err)
			h = waitHealth(t, m, "listener delivering", func(h lease.Health) bool { return h.Listener == lease.ListenerDelivering })
			require.Equal(t, dedicated, h.ListenerDedicated)
			require.False(t, h.LastDelivered.IsZero())
			require.Zero(t, h.ProbesLost)
			require.Empty(t, h.Warnings)
			require.True(t, h.Ready, "problems: %v", h.Problems)
			require.Equal(t, 1, h.Leases)
			require.Empty(t, obstest.Find(mt.Collect(), leasemetrics.ListenerProbesLost, nil))
		})
	}
}

// TestListenerDetectsUndeliveredNotifications: a LISTEN connection that
// answers but receives no notifications (here: ListenConnString pointing at
// another database; behind PgBouncer in transaction mode the same happens,
// see integration/pgbouncer) is detected by its lost probes. The Manager
// says so once (one Warn record however many probes are lost), counts it,
// reports it in Health (a warning, not a problem: it still works), and
// polls every FallbackPoll instead: a release still reaches a waiter
// although its notification never arrives and the holder's expiry and
// WaitPoll are far away. A takeover's displaced lease is ended by the
// fallback poll in per-lease mode; in heartbeat mode the poll ends no
// lease (it only wakes waiters and watchers): the heartbeat does, here
// when Lease.Renew beats.
func TestListenerDetectsUndeliveredNotifications(t *testing.T) {
	e := newEnv(t)
	mt := obstest.NewMeter(t)
	logs, logger := obstest.NewLogs()
	m, ev := observed(t, e, lease.Config{
		TTL: time.Hour, WaitPoll: 200 * time.Millisecond, CallTimeout: 300 * time.Millisecond,
		FallbackPoll: 50 * time.Millisecond, ListenConnString: otherDatabaseURL(t),
		MeterProvider: mt.Provider, Logger: logger,
	})
	other := e.manager(lease.Config{TTL: time.Hour})
	k := uniqueKey(t)
	l, err := m.Acquire(bg(), k)
	require.NoError(t, err)

	h := waitHealth(t, m, "three probes lost", func(h lease.Health) bool { return h.ProbesLost >= 3 })
	require.Equal(t, lease.ListenerNotDelivering, h.Listener)
	require.True(t, h.ListenerDedicated)
	require.Len(t, h.Warnings, 1)
	require.Contains(t, h.Warnings[0], "does not receive notifications")
	require.True(t, h.Ready, "not delivering is a warning, not a problem: %v", h.Problems)
	// (The connect-time displaced-run check on the listener's connection
	// fails too, here, where the lease schema is not in that database: its
	// Warn record is not this one.)
	notDelivering := func() int {
		n := 0
		for _, r := range logs.AtLeast(slog.LevelWarn) {
			if strings.Contains(r.Message, "does not receive notifications") {
				n++
			}
		}
		return n
	}
	require.Equal(t, 1, notDelivering(), "said once: %v", logs.AtLeast(slog.LevelWarn))
	pts := mt.Collect()
	require.GreaterOrEqual(t, obstest.Value(pts, leasemetrics.ListenerProbesLost, nil), 3.0)
	require.EqualValues(t, 1, obstest.Value(pts, leasemetrics.ListenerFallback, nil))

	// A takeover: its NOTIFY never arrives and the next renewal is 20 minutes
	// away.
	_, err = other.Takeover(bg(), k)
	require.NoError(t, err)
	if lease.HeartbeatMode(m) {
		// Two more probes lost: the fallback poll (every 50ms, in the same
		// loop) ran several times since the takeover and ended nothing.
		lost := m.Health(bg()).ProbesLost
		waitHealth(t, m, "two more probes lost", func(h lease.Health) bool { return h.ProbesLost >= lost+2 })
		require.NoError(t, l.Err(), "the fallback poll ends no lease in heartbeat mode")
		// The beat reads the displaced record and ends the lease.
		_, err = l.Renew(bg())
		require.ErrorIs(t, err, lease.ErrTakenOver)
	}
	select {
	case <-l.Done():
		require.ErrorIs(t, context.Cause(l.Context()), lease.ErrTakenOver)
	case <-time.After(10 * time.Second):
		t.Fatal("the displaced lease was not ended (per-lease: by the polling fallback; heartbeat: by the beat)")
	}

	// A waiter: the release's NOTIFY never arrives, the holder's expiry is
	// an hour away; the waiter is woken by the polling (fallback or its
	// WaitPoll) and acquires.
	k2 := uniqueKey(t)
	hl, err := other.Acquire(bg(), k2)
	require.NoError(t, err)
	out := make(chan waitResult, 1)
	go func() {
		l, err := m.AcquireWait(bg(), k2)
		out <- waitResult{l: l, err: err}
	}()
	expectWaiting(t, ev, k2, out)
	_, err = hl.Release(bg())
	require.NoError(t, err)
	select {
	case r := <-out:
		require.NoError(t, r.err)
		require.Greater(t, r.l.Token(), hl.Token())
	case <-time.After(10 * time.Second):
		t.Fatal("waiter did not acquire after the release")
	}
	ev.Mu().Lock()
	wakes := append([]string(nil), ev.Wakes...)
	ev.Mu().Unlock()
	require.Contains(t, wakes, "fallback")
	require.NotContains(t, wakes, "notify")

	require.Equal(t, 1, notDelivering(), "still said once")
	require.NoError(t, m.Close())
	require.EqualValues(t, 0, obstest.Value(mt.Collect(), leasemetrics.ListenerFallback, nil), "Close ends the fallback")
	require.Equal(t, lease.ListenerStopped, m.Health(bg()).Listener)
}

// TestListenConnStringMalformed: a ListenConnString pgx cannot parse fails
// New with a *fence.ConfigError naming the field, without repeating the string
// (it may hold a password), and starts nothing.
func TestListenConnStringMalformed(t *testing.T) {
	for _, s := range []string{"postgres://user:s3cretpw@[::1", "host=127.0.0.1 port=notaport password=s3cretpw", "postgres://user:s3cretpw@127.0.0.1:5432/db?sslmode=bogus"} {
		m, err := lease.New(lease.Config{Pool: fencetest.Pool(t), ListenConnString: s})
		require.Nil(t, m)
		require.ErrorIs(t, err, fence.ErrInvalidConfig)
		var ce *fence.ConfigError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, "ListenConnString", ce.Field)
		require.NotContains(t, err.Error(), "s3cretpw")
	}
	_, err := lease.New(lease.Config{Pool: fencetest.Pool(t), FallbackPoll: -time.Second})
	var ce *fence.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "FallbackPoll", ce.Field)
}

// readOnlyPool is a pool whose sessions are read-only while ro is set (as
// on a demoted primary during a switchover, SQLSTATE 25006).
func readOnlyPool(t *testing.T, ro *atomic.Bool) *pgxpool.Pool {
	return fencetest.PoolWith(t, fencetest.DatabaseURL(), func(c *pgxpool.Config) {
		c.PrepareConn = func(ctx context.Context, conn *pgx.Conn) (bool, error) {
			v := "off"
			if ro.Load() {
				v = "on"
			}
			_, err := conn.Exec(ctx, "SELECT set_config('default_transaction_read_only', $1, false)", v)
			return err == nil, err
		}
	})
}

// TestAcquireWaitRetriesReadOnly: during a switchover the old primary
// answers 25006 (read-only). AcquireWait keeps retrying until the node
// accepts writes, then acquires; and when ctx ends first, its error matches
// both the ctx error and the last cause (the server's 25006).
func TestAcquireWaitRetriesReadOnly(t *testing.T) {
	e := newEnv(t)
	var ro atomic.Bool
	ro.Store(true)
	mt := obstest.NewMeter(t)
	m := e.manager(lease.Config{Pool: readOnlyPool(t, &ro), MeterProvider: mt.Provider})

	ctx, cancel := context.WithTimeout(bg(), 500*time.Millisecond)
	defer cancel()
	_, err := m.AcquireWait(ctx, uniqueKey(t))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "25006", pe.Code)
	attempts := obstest.Count(mt.Collect(), leasemetrics.AcquireDuration, nil)
	require.Greater(t, attempts, uint64(2), "retried, not returned at the first 25006")

	k := uniqueKey(t)
	out := make(chan waitResult, 1)
	go func() {
		l, err := m.AcquireWait(bg(), k)
		out <- waitResult{l: l, err: err}
	}()
	waitFor(t, 10*time.Second, "more refused attempts", func() bool {
		return obstest.Count(mt.Collect(), leasemetrics.AcquireDuration, nil) > attempts+2
	})
	select {
	case r := <-out:
		t.Fatalf("AcquireWait returned while the node was read-only: %v", r.err)
	default:
	}
	ro.Store(false) // the switchover ends
	select {
	case r := <-out:
		require.NoError(t, r.err)
		require.NoError(t, r.l.Err())
	case <-time.After(10 * time.Second):
		t.Fatal("AcquireWait did not acquire once the node accepted writes")
	}
}

// TestAcquireWaitRetriesUncheckedNode: while the token floor is not checked
// on the node (after a failover) every grant is refused (FK002). AcquireWait
// retries until the check passes, then acquires. When its ctx ends first,
// the error matches the ctx error, ErrFailoverUnchecked and
// *FailoverError. Every refusal is counted, but the log gets one Error
// record for the whole run of refusals, and one Info record when grants are
// accepted again. Health reports the unchecked node and the refusals.
func TestAcquireWaitRetriesUncheckedNode(t *testing.T) {
	e := newEnv(t)
	mt := obstest.NewMeter(t)
	logs, logger := obstest.NewLogs()
	ms := []*lease.Manager{
		e.manager(lease.Config{MeterProvider: mt.Provider, Logger: logger}),
		e.manager(lease.Config{MeterProvider: mt.Provider, Logger: logger}),
	}
	var node string
	require.NoError(t, e.raw.QueryRow(bg(), fmt.Sprintf(`SELECT checked_node FROM %q.fencekit_token_floor WHERE id`, e.schema)).Scan(&node))
	_, err := e.raw.Exec(bg(), fmt.Sprintf(`UPDATE %q.fencekit_token_floor SET checked_node = 'elsewhere' WHERE id`, e.schema))
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(bg(), 400*time.Millisecond)
	defer cancel()
	_, err = ms[0].AcquireWait(ctx, uniqueKey(t))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, lease.ErrFailoverUnchecked)
	var fe *lease.FailoverError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "elsewhere", fe.Checked)

	h := ms[1].Health(bg())
	require.True(t, h.NodeUnchecked)
	require.False(t, h.Ready)
	require.Equal(t, "elsewhere", h.CheckedNode)
	require.NotEmpty(t, h.Problems)

	// Several waiters on two Managers keep retrying.
	outs := make(chan waitResult, 4)
	for i := range 4 {
		go func() {
			l, err := ms[i%2].AcquireWait(bg(), uniqueKey(t))
			outs <- waitResult{l: l, err: err}
		}()
	}
	failover := map[string]string{"reason": leasemetrics.ReasonFailoverUnchecked}
	waitFor(t, 10*time.Second, "many refusals", func() bool {
		return obstest.Value(mt.Collect(), leasemetrics.Refused, failover) >= 20
	})
	refused := obstest.Value(mt.Collect(), leasemetrics.Refused, failover)
	errs := logs.AtLeast(slog.LevelError)
	require.Len(t, errs, 2, "one Error record per Manager for %v refusals: %v", refused, errs)
	h = ms[0].Health(bg())
	require.False(t, h.RefusedSince.IsZero())
	require.Greater(t, h.Refused, int64(1))

	// The floor check passes on this node: every waiter acquires.
	_, err = e.raw.Exec(bg(), fmt.Sprintf(`UPDATE %q.fencekit_token_floor SET checked_node = $1 WHERE id`, e.schema), node)
	require.NoError(t, err)
	for range 4 {
		select {
		case r := <-outs:
			require.NoError(t, r.err)
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter did not acquire after the floor check")
		}
	}
	require.Len(t, logs.Messages("lease: grants accepted again"), 2)
	for _, m := range ms {
		h := m.Health(bg())
		require.True(t, h.Ready, "problems: %v", h.Problems)
		require.True(t, h.RefusedSince.IsZero())
	}
	require.Len(t, logs.AtLeast(slog.LevelError), 2, "no further Error record")
}

// TestHealthReportsUnmigratedSchema: a Manager on a schema without the lease
// migrations is not ready, and says why.
func TestHealthReportsUnmigratedSchema(t *testing.T) {
	pool := fencetest.Pool(t)
	schema := fencetest.RandomName("fk_empty_")
	_, err := pool.Exec(bg(), "CREATE SCHEMA "+schema)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	m, err := lease.New(lease.Config{Pool: pool, Schema: schema})
	require.NoError(t, err)
	defer func() { require.NoError(t, m.Close()) }()
	h := m.Health(bg())
	require.False(t, h.Ready)
	require.False(t, h.SchemaMigrated)
	require.ErrorIs(t, h.Err, migrations.ErrNotMigrated)
	require.True(t, strings.Contains(strings.Join(h.Problems, "; "), "not migrated"), "problems: %v", h.Problems)
}

// TestHealthRenewalAge: the renewer completes rounds every RenewEvery/4
// while the database answers; with the database unreachable the age of the
// last complete round grows past RenewEvery + CallTimeout and Health is
// not ready.
func TestHealthRenewalAge(t *testing.T) {
	e := newEnv(t)
	pool, proxy := proxiedPool(t)
	defer proxy.Restore()
	// CallTimeout 1s: the grant through the proxy must fit in it on a
	// loaded machine; the blackholed renewal's age still passes it.
	m := e.manager(lease.Config{Pool: pool, TTL: 10 * time.Second, CallTimeout: time.Second})
	_, err := m.Acquire(bg(), uniqueKey(t))
	require.NoError(t, err)
	h := m.Health(bg())
	require.True(t, h.Ready, "problems: %v", h.Problems)
	require.Less(t, h.RenewalAge, time.Second)
	proxy.Blackhole()
	// The lease's trust deadline is 8 s away; its first renewal falls due
	// after RenewEvery (3.3 s) and fails, so the age passes 4.3 s before.
	h = waitHealth(t, m, "stale renewal rounds", func(h lease.Health) bool {
		return strings.Contains(strings.Join(h.Problems, "; "), "no complete renewal round")
	})
	require.False(t, h.Ready)
	require.Error(t, h.Err)
	require.Equal(t, 1, h.Leases)
	if errors.Is(h.Err, migrations.ErrNotMigrated) {
		t.Fatalf("unreachable database reported as not migrated: %v", h.Err)
	}
}
