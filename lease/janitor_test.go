package lease_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/internal/obs/obstest"
	"github.com/fencekit/fencekit/internal/testsvc"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// age moves the key's row back in time by d: released rows keep
// expires_at = released_at.
func (e *env) age(k lease.Key, d time.Duration) {
	e.t.Helper()
	tag, err := e.raw.Exec(bg(), fmt.Sprintf(`UPDATE %q.fencekit_leases
		SET acquired_at = acquired_at - $3::bigint * interval '1 microsecond',
		    renewed_at  = renewed_at  - $3::bigint * interval '1 microsecond',
		    expires_at  = expires_at  - $3::bigint * interval '1 microsecond',
		    released_at = released_at - $3::bigint * interval '1 microsecond'
		WHERE account_id=$1 AND session_id=$2`, e.schema), k.AccountID, k.SessionID, d.Microseconds())
	require.NoError(e.t, err)
	require.EqualValues(e.t, 1, tag.RowsAffected())
}

// TestJanitorSweep: rows released or expired longer ago than the retention
// are deleted in bounded batches; recent, held and locked rows stay; a key
// whose row was deleted is granted a larger token than before.
func TestJanitorSweep(t *testing.T) {
	e := newEnv(t)
	m := e.manager(lease.Config{})
	mt := obstest.NewMeter(t)
	j, err := lease.NewJanitor(lease.JanitorConfig{Pool: testsvc.Pool(t), Schema: e.schema, BatchSize: 2, MeterProvider: mt.Provider})
	require.NoError(t, err)
	require.Equal(t, lease.DefaultRetention, j.Retention())

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
		_, ok := e.row(l.Key())
		require.False(t, ok, "old row %s kept", l.Key())
	}
	for _, l := range []*lease.Lease{recent, held, locked} {
		_, ok := e.row(l.Key())
		require.True(t, ok, "row %s deleted", l.Key())
	}
	require.NoError(t, held.Err(), "the held lease is untouched")
	require.EqualValues(t, 5, obstest.Value(mt.Collect(), lease.MetricJanitorDeleted, map[string]string{"table": "leases"}))

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
	one, err := lease.NewJanitor(lease.JanitorConfig{Pool: e.raw, Schema: e.schema, BatchSize: 1, MaxBatches: 2})
	require.NoError(t, err)
	res, err = one.Sweep(bg())
	require.NoError(t, err)
	require.Equal(t, lease.SweepResult{Deleted: 2, Batches: 2, More: true}, res)
}

// TestJanitorStartStop: the background loop sweeps at once and then every
// Interval; Stop ends it (goleak checks in TestMain), is idempotent, and a
// stopped Janitor cannot be restarted.
func TestJanitorStartStop(t *testing.T) {
	e := newEnv(t)
	m := e.manager(lease.Config{})
	l, err := m.Acquire(bg(), uniqueKey(t))
	require.NoError(t, err)
	_, err = l.Release(bg())
	require.NoError(t, err)
	e.age(l.Key(), 2*time.Hour)
	logs, logger := obstest.NewLogs()
	j, err := lease.NewJanitor(lease.JanitorConfig{Pool: testsvc.Pool(t), Schema: e.schema, Retention: time.Hour, Interval: time.Hour, Logger: logger})
	require.NoError(t, err)
	require.NoError(t, j.Start())
	require.ErrorIs(t, j.Start(), lease.ErrJanitorState)
	waitFor(t, 10*time.Second, "the first sweep", func() bool { _, ok := e.row(l.Key()); return !ok })
	waitFor(t, 10*time.Second, "the sweep's log", func() bool { return len(logs.Messages("lease: janitor sweep")) > 0 })
	j.Stop()
	j.Stop()
	require.ErrorIs(t, j.Start(), lease.ErrJanitorState)

	never, err := lease.NewJanitor(lease.JanitorConfig{Pool: e.raw})
	require.NoError(t, err)
	never.Stop() // without Start
}

// TestJanitorConfig: retention shorter than the statement bound allows, or
// than MinRetention, and other bad fields are refused with a ConfigError.
func TestJanitorConfig(t *testing.T) {
	pool := testsvc.Pool(t)
	for name, cfg := range map[string]lease.JanitorConfig{
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
		_, err := lease.NewJanitor(cfg)
		require.ErrorIs(t, err, lease.ErrInvalidConfig, name)
	}
	_, err := lease.NewJanitor(lease.JanitorConfig{Pool: pool, Retention: 200 * time.Minute, StatementBound: 2 * time.Minute})
	require.NoError(t, err, "exactly 100 × bound")
}

// TestGuardMarksPrune: marks of resources that are gone are deleted by name
// or by idleness, in bounded statements; a deleted mark lets an old token
// write again (the documented hazard), which is why only gone resources
// may be pruned.
func TestGuardMarksPrune(t *testing.T) {
	schema := testsvc.Schema(t, migrations.Guard)
	pool := testsvc.Pool(t)
	g, err := pgguard.New(pgguard.Config{DB: pool, Schema: schema})
	require.NoError(t, err)
	mt := obstest.NewMeter(t)
	gm, err := lease.NewGuardMarks(lease.GuardMarksConfig{DB: testsvc.Pool(t), Schema: schema, MeterProvider: mt.Provider})
	require.NoError(t, err)
	write := func(context.Context) error { return nil }
	h, err := gm.Highest(bg())
	require.NoError(t, err)
	require.Zero(t, h, "no marks")

	for i, r := range []string{"gone/1", "idle/2", "live/3", "live/4"} {
		require.NoError(t, g.Fence(bg(), r, fence.Token(10*(i+1)), write))
	}
	h, err = gm.Highest(bg())
	require.NoError(t, err)
	require.EqualValues(t, 40, h)

	n, err := gm.DeleteResources(bg(), []string{"gone/1", "never/existed"})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	mark, err := g.Mark(bg(), "gone/1")
	require.NoError(t, err)
	require.Zero(t, mark)
	require.NoError(t, g.Fence(bg(), "gone/1", 1, write), "the hazard: a deleted mark admits any token")

	_, err = pool.Exec(bg(), fmt.Sprintf(`UPDATE %q.fencekit_guard_marks SET updated_at = clock_timestamp() - interval '2 hours' WHERE resource = 'idle/2'`, schema))
	require.NoError(t, err)
	n, err = gm.DeleteIdle(bg(), time.Hour, 10)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	for _, r := range []string{"live/3", "live/4"} {
		mark, err := g.Mark(bg(), r)
		require.NoError(t, err)
		require.Positive(t, mark, "%s kept", r)
	}
	require.EqualValues(t, 2, obstest.Value(mt.Collect(), lease.MetricJanitorDeleted, map[string]string{"table": "guard_marks"}))

	// Bad input changes nothing.
	_, err = gm.DeleteResources(bg(), []string{"live/3", ""})
	require.ErrorIs(t, err, lease.ErrInvalidArgument)
	_, err = gm.DeleteResources(bg(), make([]string, lease.MaxBatch+1))
	require.ErrorIs(t, err, lease.ErrInvalidArgument)
	_, err = gm.DeleteIdle(bg(), time.Minute, 10)
	require.ErrorIs(t, err, lease.ErrInvalidArgument)
	_, err = gm.DeleteIdle(bg(), time.Hour, 0)
	require.ErrorIs(t, err, lease.ErrInvalidArgument)
	mark, err = g.Mark(bg(), "live/3")
	require.NoError(t, err)
	require.EqualValues(t, 30, mark)
	_, err = lease.NewGuardMarks(lease.GuardMarksConfig{})
	require.ErrorIs(t, err, lease.ErrInvalidConfig)
	_, err = lease.NewGuardMarks(lease.GuardMarksConfig{DB: pool, Schema: "x;y"})
	require.ErrorIs(t, err, lease.ErrInvalidConfig)
}
