package leaseops_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/internal/obs/obstest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/internal/leasemetrics"
	"github.com/fencekit/fencekit/lease/leaseops"
)

// TestJanitorSweep: rows released or expired longer ago than the retention
// are deleted in bounded batches; recent, held and locked rows stay; a key
// whose row was deleted is granted a larger token than before.
func TestJanitorSweep(t *testing.T) {
	e := newEnv(t)
	// Per-lease rows, aged one by one (TestJanitorSweepsHeartbeatRows ages
	// heartbeats).
	m := e.manager(lease.Config{Renewal: lease.RenewalPerLease})
	mt := obstest.NewMeter(t)
	j, err := leaseops.NewJanitor(leaseops.JanitorConfig{Pool: fencetest.Pool(t), Schema: e.schema, BatchSize: 2, MeterProvider: mt.Provider})
	require.NoError(t, err)
	t.Cleanup(func() { _ = j.Close() })
	require.Equal(t, leaseops.DefaultRetention, j.Retention())

	acquire := func() *lease.Lease {
		l, err := m.Acquire(bg(), uniqueKey(t))
		require.NoError(t, err)
		return l
	}
	var old []*lease.Lease
	for i := range 5 { // 3 released, 2 expired without release, all 25h ago
		l := acquire()
		if i < 3 {
			_, err := l.Release(bg())
			require.NoError(t, err)
		} else {
			_, err := m.Release(bg(), l.Key(), uuid.New()) // leaves it held: NotHolder
			require.NoError(t, err)
		}
		e.age(l.Key(), 25*time.Hour)
		old = append(old, l)
	}
	recent := acquire()
	_, err = recent.Release(bg())
	require.NoError(t, err)
	e.age(recent.Key(), 23*time.Hour) // inside the retention
	held := acquire()
	locked := acquire()
	_, err = locked.Release(bg())
	require.NoError(t, err)
	e.age(locked.Key(), 25*time.Hour)

	// A transaction holds the row lock of one old row: the sweep skips it
	// instead of waiting.
	tx, err := e.raw.Begin(bg())
	require.NoError(t, err)
	_, err = tx.Exec(bg(), fmt.Sprintf(`SELECT 1 FROM %q.fencekit_leases WHERE account_id=$1 AND session_id=$2 FOR UPDATE`, e.schema),
		locked.Key().AccountID, locked.Key().SessionID)
	require.NoError(t, err)
	res, err := j.Sweep(bg())
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(bg()))
	require.EqualValues(t, 5, res.Deleted)
	require.Equal(t, 3, res.Batches, "batches of 2: 2, 2, 1")
	require.False(t, res.More)
	for _, l := range old {
		require.False(t, e.hasRow(l.Key()), "old row %s kept", l.Key())
	}
	for _, l := range []*lease.Lease{recent, held, locked} {
		require.True(t, e.hasRow(l.Key()), "row %s deleted", l.Key())
	}
	require.NoError(t, held.Err(), "the held lease is untouched")
	require.EqualValues(t, 5, obstest.Value(mt.Collect(), leasemetrics.JanitorDeleted, map[string]string{"table": "leases"}))

	// The next sweep takes the row that was locked.
	res, err = j.Sweep(bg())
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Deleted)

	// Token order survives the delete: a fresh grant of a deleted key is larger.
	again, err := m.Acquire(bg(), old[0].Key())
	require.NoError(t, err)
	require.Greater(t, again.Token(), held.Token())

	// MaxBatches bounds one sweep.
	for range 3 {
		l := acquire()
		_, err := l.Release(bg())
		require.NoError(t, err)
		e.age(l.Key(), 48*time.Hour)
	}
	one, err := leaseops.NewJanitor(leaseops.JanitorConfig{Pool: e.raw, Schema: e.schema, BatchSize: 1, MaxBatches: 2})
	require.NoError(t, err)
	require.NoError(t, one.Close(), "Sweep works after Close")
	res, err = one.Sweep(bg())
	require.NoError(t, err)
	require.Equal(t, leaseops.SweepResult{Deleted: 2, Batches: 2, More: true}, res)
}

// TestJanitorSweepsDisplacedRuns: the record of a run a takeover displaced
// (migration 0007) is deleted once it is older than the retention, in the
// same bounded batches; a recent one stays, and the displaced run it names
// is still explained as taken over.
func TestJanitorSweepsDisplacedRuns(t *testing.T) {
	e := newEnv(t)
	m := e.manager(lease.Config{TTL: time.Hour})
	mt := obstest.NewMeter(t)
	j, err := leaseops.NewJanitor(leaseops.JanitorConfig{Pool: fencetest.Pool(t), Schema: e.schema, BatchSize: 2, MeterProvider: mt.Provider})
	require.NoError(t, err)
	t.Cleanup(func() { _ = j.Close() })

	var old []*lease.Lease
	for range 3 {
		k := uniqueKey(t)
		l, err := m.Acquire(bg(), k)
		require.NoError(t, err)
		_, err = m.Takeover(bg(), k)
		require.NoError(t, err)
		old = append(old, l)
	}
	k := uniqueKey(t)
	recent, err := m.Acquire(bg(), k)
	require.NoError(t, err)
	_, err = m.Takeover(bg(), k)
	require.NoError(t, err)
	for _, l := range old {
		require.EqualValues(t, 1, e.exec(`UPDATE %q.fencekit_displaced SET displaced_at = displaced_at - interval '25 hours' WHERE run_id = $1`, l.RunID()))
	}

	res, err := j.Sweep(bg())
	require.NoError(t, err)
	require.EqualValues(t, 3, res.Displaced)
	require.Zero(t, res.Deleted, "the lease rows are held")
	require.Equal(t, 2, res.Batches, "batches of 2: 2, 1")
	require.EqualValues(t, 3, obstest.Value(mt.Collect(), leasemetrics.JanitorDeleted, map[string]string{"table": "displaced"}))
	require.EqualValues(t, 1, e.exec(`SELECT 1 FROM %q.fencekit_displaced WHERE run_id = $1`, recent.RunID()), "the recent record stays")
	_, err = m.Renew(bg(), k, recent.RunID())
	require.ErrorIs(t, err, lease.ErrTakenOver)
	_, err = m.Renew(bg(), old[0].Key(), old[0].RunID())
	require.ErrorIs(t, err, lease.ErrLost)
	require.NotErrorIs(t, err, lease.ErrTakenOver, "its record is gone")
}

// TestJanitorLifecycle: NewJanitor starts the background loop, which
// sweeps every Interval (the first one Interval after NewJanitor); Close
// ends it (goleak checks in TestMain) and is idempotent.
func TestJanitorLifecycle(t *testing.T) {
	e := newEnv(t)
	m := e.manager(lease.Config{})
	l, err := m.Acquire(bg(), uniqueKey(t))
	require.NoError(t, err)
	_, err = l.Release(bg())
	require.NoError(t, err)
	e.age(l.Key(), 2*time.Hour)
	logs, logger := obstest.NewLogs()
	j, err := leaseops.NewJanitor(leaseops.JanitorConfig{Pool: fencetest.Pool(t), Schema: e.schema, Retention: time.Hour, Interval: 50 * time.Millisecond, Logger: logger})
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "a background sweep", func() bool { return !e.hasRow(l.Key()) })
	waitFor(t, 10*time.Second, "the sweep's log", func() bool { return len(logs.Messages("leaseops: janitor sweep")) > 0 })
	require.NoError(t, j.Close())
	require.NoError(t, j.Close())
}

// TestJanitorConfig: retention shorter than the statement bound allows, or
// than MinRetention, and other bad fields are refused with a ConfigError.
func TestJanitorConfig(t *testing.T) {
	pool := fencetest.Pool(t)
	for name, cfg := range map[string]leaseops.JanitorConfig{
		"nil pool":                              {},
		"bad schema":                            {Pool: pool, Schema: "Bad-Schema"},
		"short retention":                       {Pool: pool, Retention: 59 * time.Minute},
		"retention below 100 × statement bound": {Pool: pool, Retention: 2 * time.Hour, StatementBound: 2 * time.Minute},
		"negative bound":                        {Pool: pool, StatementBound: -time.Second},
		"batch too large":                       {Pool: pool, BatchSize: lease.MaxBatch + 1},
		"negative batch":                        {Pool: pool, BatchSize: -1},
		"negative max":                          {Pool: pool, MaxBatches: -1},
		"negative every":                        {Pool: pool, Interval: -time.Second},
		"negative call":                         {Pool: pool, CallTimeout: -time.Second},
	} {
		_, err := leaseops.NewJanitor(cfg)
		require.ErrorIs(t, err, fence.ErrInvalidConfig, name)
	}
	j, err := leaseops.NewJanitor(leaseops.JanitorConfig{Pool: pool, Retention: 200 * time.Minute, StatementBound: 2 * time.Minute})
	require.NoError(t, err, "exactly 100 × bound")
	require.NoError(t, j.Close())
}

// TestJanitorSweepsHeartbeatRows: a heartbeat row (migration 0009) is dead
// since its heartbeat's expiry; it is deleted once that is older than the
// retention, while a live heartbeat's rows and a recent dead one's stay. A
// heartbeat row expired longer ago than the retention is deleted too, and
// then a row whose heartbeat row is gone is judged by its grant time.
func TestJanitorSweepsHeartbeatRows(t *testing.T) {
	e := newEnv(t)
	cfg := lease.Config{TTL: time.Hour, Renewal: lease.RenewalHeartbeat}
	dead, recent, live := e.manager(cfg), e.manager(cfg), e.manager(cfg)
	acquire := func(m *lease.Manager) *lease.Lease {
		l, err := m.Acquire(bg(), uniqueKey(t))
		require.NoError(t, err)
		return l
	}
	ld1, ld2, lr, ll := acquire(dead), acquire(dead), acquire(recent), acquire(live)
	epochOf := func(l *lease.Lease) uuid.UUID {
		var id uuid.UUID
		require.EqualValues(t, 1, e.exec(`SELECT manager_id FROM %q.fencekit_leases WHERE account_id=$1 AND session_id=$2 AND expires_at = 'infinity'`,
			l.Key().AccountID, l.Key().SessionID))
		require.NoError(t, e.raw.QueryRow(bg(), fmt.Sprintf(`SELECT manager_id FROM %q.fencekit_leases WHERE account_id=$1 AND session_id=$2`, e.schema),
			l.Key().AccountID, l.Key().SessionID).Scan(&id))
		return id
	}
	// The dead heartbeat expired 25 hours ago (and its grants were made
	// before that); the recent one 23 hours ago.
	e.exec(`UPDATE %q.fencekit_managers SET expires_at = clock_timestamp() - interval '25 hours' WHERE manager_id = $1`, epochOf(ld1))
	e.exec(`UPDATE %q.fencekit_leases SET acquired_at = acquired_at - interval '26 hours' WHERE manager_id = $1`, epochOf(ld1))
	e.exec(`UPDATE %q.fencekit_managers SET expires_at = clock_timestamp() - interval '23 hours' WHERE manager_id = $1`, epochOf(lr))

	j, err := leaseops.NewJanitor(leaseops.JanitorConfig{Pool: fencetest.Pool(t), Schema: e.schema})
	require.NoError(t, err)
	t.Cleanup(func() { _ = j.Close() })
	res, err := j.Sweep(bg())
	require.NoError(t, err)
	require.EqualValues(t, 2, res.Deleted, "the dead heartbeat's two rows")
	require.EqualValues(t, 1, res.Managers, "the dead heartbeat's own row")
	require.False(t, e.hasRow(ld1.Key()))
	require.False(t, e.hasRow(ld2.Key()))
	require.True(t, e.hasRow(lr.Key()), "dead for less than the retention")
	require.True(t, e.hasRow(ll.Key()), "live")
	require.NoError(t, ll.Err())

	// A heartbeat row whose heartbeat row is gone: judged by acquired_at.
	e.exec(`DELETE FROM %q.fencekit_managers WHERE manager_id = $1`, epochOf(lr))
	res, err = j.Sweep(bg())
	require.NoError(t, err)
	require.Zero(t, res.Deleted, "granted within the retention")
	e.exec(`UPDATE %q.fencekit_leases SET acquired_at = acquired_at - interval '25 hours' WHERE account_id = $1 AND session_id = $2`,
		lr.Key().AccountID, lr.Key().SessionID)
	res, err = j.Sweep(bg())
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Deleted)
	require.True(t, e.hasRow(ll.Key()))
}
