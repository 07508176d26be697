package leaseops_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/internal/obs/obstest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/internal/leasemetrics"
	"github.com/fencekit/fencekit/lease/leaseops"
)

// otherNode makes the schema's floor look checked on another node, as the
// floor row replicated from an old primary looks on a promoted replica
// (another timeline) or a restored dump in a fresh database (another
// database oid or system identifier). Real promotions and restores run in
// integration/failover.
func (e *env) otherNode() {
	e.t.Helper()
	require.EqualValues(e.t, 1, e.exec(`UPDATE %q.fencekit_token_floor SET checked_node = '1:1/00000001'`))
}

// TestGrantsFailClosedOnUncheckedNode: once the floor is recorded as
// checked on another node, every grant — new keys and takeovers, on pooled
// connections that acquired before (their per-connection cache of the
// node's system part cannot keep the old answer) — is refused with
// ErrFailoverUnchecked, writes no row and names both nodes; renewals and
// releases of held leases go on. The floor check records this node and
// grants resume above the floor.
func TestGrantsFailClosedOnUncheckedNode(t *testing.T) {
	e := newEnv(t)
	mt := obstest.NewMeter(t)
	logs, logger := obstest.NewLogs()
	m := e.manager(lease.Config{MeterProvider: mt.Provider, Logger: logger})
	tf := e.floor(lease.StaticFloor(0))
	node := e.checkedNode()
	require.Regexp(t, `^[0-9]+:[0-9]+/[0-9A-F]{8}$`, node, "the migration records the node it ran on")

	held, err := m.Acquire(bg(), uniqueKey(t)) // warms the pool's connections
	require.NoError(t, err)
	expired, err := m.Acquire(bg(), uniqueKey(t))
	require.NoError(t, err)
	_, err = expired.Release(bg())
	require.NoError(t, err)
	e.expire(expired.Key())
	lastBefore, _ := e.seq()

	e.otherNode()
	rows := e.rowCount()
	for _, k := range []lease.Key{uniqueKey(t), expired.Key()} {
		_, err := m.Acquire(bg(), k)
		require.ErrorIs(t, err, lease.ErrFailoverUnchecked, "key %s", k)
		require.NotErrorIs(t, err, lease.ErrHeld)
		var fe *lease.FailoverError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "1:1/00000001", fe.Checked)
		require.Equal(t, node, fe.Node)
	}
	require.Equal(t, rows, e.rowCount(), "refused grants write no row")
	require.False(t, e.hasRow(lease.Key{AccountID: "x", SessionID: "y"}))
	_, err = held.Renew(bg())
	require.NoError(t, err, "renewals issue no token and go on")
	require.EqualValues(t, 2, obstest.Value(mt.Collect(), leasemetrics.Refused, map[string]string{"reason": leasemetrics.ReasonFailoverUnchecked}))
	errs := logs.AtLeast(slog.LevelError)
	require.NotEmpty(t, errs)
	require.Contains(t, errs[len(errs)-1].Message, "not checked on this database node")

	rep, err := tf.Check(bg())
	require.NoError(t, err)
	require.Equal(t, node, rep.Node)
	require.Equal(t, node, rep.CheckedNode)
	require.Equal(t, node, e.checkedNode())
	l, err := m.Acquire(bg(), expired.Key())
	require.NoError(t, err)
	require.Greater(t, int64(l.Token()), lastBefore)
	_, err = l.Release(bg())
	require.NoError(t, err)
	_, err = held.Release(bg())
	require.NoError(t, err)
}

// TestFailedFloorCheckKeepsGrantsRefused: on an unchecked node whose
// sequence is behind the floor source, Check fails with ErrTokenFloor,
// records no node and leaves the sequence (grants stay refused as
// unchecked); CheckFloor moves the sequence past the floor and records the
// node; grants then carry tokens above the floor.
func TestFailedFloorCheckKeepsGrantsRefused(t *testing.T) {
	e := newEnv(t)
	m := e.manager(lease.Config{})
	const floor = 500
	tf := e.floor(lease.StaticFloor(floor))
	node := e.checkedNode()
	e.otherNode()

	seqBefore, _ := e.seq()
	rep, err := tf.Check(bg())
	require.ErrorIs(t, err, lease.ErrTokenFloor)
	require.Equal(t, node, rep.Node)
	require.Equal(t, "1:1/00000001", rep.CheckedNode, "a failed check records no node")
	require.Equal(t, "1:1/00000001", rep.CheckedBefore)
	require.EqualValues(t, floor, rep.Stored)
	seqAfter, _ := e.seq()
	require.Equal(t, seqBefore, seqAfter, "Check never moves the sequence")
	_, err = m.Acquire(bg(), uniqueKey(t))
	require.ErrorIs(t, err, lease.ErrFailoverUnchecked)

	rep, err = e.advance(lease.StaticFloor(floor))
	require.NoError(t, err)
	require.EqualValues(t, floor+1, rep.Next)
	require.Equal(t, node, rep.CheckedNode)
	l, err := m.Acquire(bg(), uniqueKey(t))
	require.NoError(t, err)
	require.Greater(t, l.Token(), fence.Token(floor))

	// On a checked node, a floor raised above the sequence refuses grants
	// with ErrTokenFloor (not unchecked): the node is still the checked one.
	high := e.floor(lease.StaticFloor(10_000))
	_, err = high.Check(bg())
	require.ErrorIs(t, err, lease.ErrTokenFloor)
	_, err = m.Acquire(bg(), uniqueKey(t))
	require.ErrorIs(t, err, lease.ErrTokenFloor)
	require.NotErrorIs(t, err, lease.ErrFailoverUnchecked)
}

// TestFailClosedUnderLeastPrivilege: a role with only USAGE on the schema,
// SELECT/INSERT/UPDATE on fencekit_leases and USAGE/SELECT on the sequence
// (the grants documented in docs/operations.md) acquires normally, is
// refused with ErrFailoverUnchecked on an unchecked node, cannot record
// the node itself, and acquires again after the operator's check.
func TestFailClosedUnderLeastPrivilege(t *testing.T) {
	e := newEnv(t)
	role := fencetest.RandomName("fk_role_")
	_, err := e.raw.Exec(bg(), `CREATE ROLE `+role+` LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOBYPASSRLS NOREPLICATION`)
	require.NoError(t, err)
	for _, s := range []string{
		`GRANT USAGE ON SCHEMA %q TO ` + role,
		`GRANT SELECT, INSERT, UPDATE ON %q.fencekit_leases TO ` + role,
		`GRANT SELECT, INSERT, UPDATE ON %[1]q.fencekit_managers, %[1]q.fencekit_displaced TO ` + role,
		`GRANT USAGE, SELECT ON SEQUENCE %q.fencekit_token_seq TO ` + role,
	} {
		e.exec(s)
	}
	t.Cleanup(func() {
		for _, s := range []string{"DROP OWNED BY " + role, "DROP ROLE IF EXISTS " + role} {
			if _, err := e.raw.Exec(context.Background(), s); err != nil {
				t.Errorf("%s: %v", s, err)
			}
		}
	})
	app := fencetest.PoolWith(t, fencetest.DatabaseURL(), func(c *pgxpool.Config) { c.ConnConfig.User = role })
	m := e.manager(lease.Config{Pool: app})
	l, err := m.Acquire(bg(), uniqueKey(t))
	require.NoError(t, err)
	_, err = l.Release(bg())
	require.NoError(t, err)

	e.otherNode()
	_, err = m.Acquire(bg(), uniqueKey(t))
	require.ErrorIs(t, err, lease.ErrFailoverUnchecked)
	_, err = app.Exec(bg(), fmt.Sprintf(`UPDATE %q.fencekit_token_floor SET checked_node = NULL`, e.schema))
	require.Error(t, err, "the application role cannot record a check")

	_, err = e.floor(lease.StaticFloor(0)).Check(bg())
	require.NoError(t, err)
	l, err = m.Acquire(bg(), uniqueKey(t))
	require.NoError(t, err)
	_, err = l.Release(bg())
	require.NoError(t, err)
}

// TestTokenFloorConfig: bad fields are refused with a ConfigError.
func TestTokenFloorConfig(t *testing.T) {
	pool := fencetest.Pool(t)
	for name, cfg := range map[string]leaseops.TokenFloorConfig{
		"nil pool":      {Source: lease.StaticFloor(0)},
		"nil source":    {Pool: pool},
		"bad schema":    {Pool: pool, Source: lease.StaticFloor(0), Schema: "x;y"},
		"negative call": {Pool: pool, Source: lease.StaticFloor(0), CallTimeout: -1},
	} {
		_, err := leaseops.NewTokenFloor(cfg)
		require.ErrorIs(t, err, fence.ErrInvalidConfig, name)
	}
}

// TestFloorStatus, in every exec mode: Status reports the stored floor, the
// next token and both nodes, and the refusal the acquire statement would
// raise — none on the checked node, ErrFailoverUnchecked on another,
// ErrTokenFloor below the floor — without changing anything.
func TestFloorStatus(t *testing.T) {
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) {
			e := newEnv(t)
			pool := fencetest.PoolWith(t, fencetest.DatabaseURL(), func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = mode })
			tf, err := leaseops.NewTokenFloor(leaseops.TokenFloorConfig{Pool: pool, Schema: e.schema, Source: lease.StaticFloor(0)})
			require.NoError(t, err)
			node := e.checkedNode()
			state := func() string {
				var s string
				require.NoError(t, e.raw.QueryRow(bg(), fmt.Sprintf(`SELECT row_to_json(f)::text || (SELECT format('%%s/%%s', last_value, is_called) FROM %q.fencekit_token_seq) FROM %q.fencekit_token_floor f`, e.schema, e.schema)).Scan(&s))
				return s
			}

			st, err := tf.Status(bg())
			require.NoError(t, err)
			require.NoError(t, st.Refused())
			require.Equal(t, node, st.Node)
			require.Equal(t, node, st.CheckedNode)
			require.False(t, st.InRecovery)
			require.EqualValues(t, 1, st.Next)
			require.Zero(t, st.Stored)
			require.False(t, st.UpdatedAt.IsZero())

			e.otherNode()
			before := state()
			st, err = tf.Status(bg())
			require.NoError(t, err)
			var fe *lease.FailoverError
			require.ErrorAs(t, st.Refused(), &fe)
			require.Equal(t, "1:1/00000001", fe.Checked)
			require.Equal(t, node, fe.Node)
			require.Equal(t, before, state(), "Status changes nothing")

			_, err = e.advance(lease.StaticFloor(500))
			require.NoError(t, err)
			st, err = tf.Status(bg())
			require.NoError(t, err)
			require.NoError(t, st.Refused())
			require.EqualValues(t, 500, st.Stored)
			require.EqualValues(t, 501, st.Next)

			_, err = e.floor(lease.StaticFloor(10_000)).Check(bg())
			require.ErrorIs(t, err, lease.ErrTokenFloor)
			st, err = tf.Status(bg())
			require.NoError(t, err)
			require.ErrorIs(t, st.Refused(), lease.ErrTokenFloor)
			require.NotErrorIs(t, st.Refused(), lease.ErrFailoverUnchecked)
			require.EqualValues(t, 10_000, st.Stored)
		})
	}
	standby := leaseops.FloorReport{InRecovery: true}
	require.ErrorIs(t, standby.Refused(), leaseops.ErrStandby)
}

// TestCheckWithoutAdvanceRefusesGap: the floor check function without
// advance never moves the sequence, so it refuses a node change gap
// (SQLSTATE 22023) and changes nothing.
func TestCheckWithoutAdvanceRefusesGap(t *testing.T) {
	e := newEnv(t)
	e.otherNode()
	before, _ := e.seq()
	_, err := e.raw.Exec(bg(), fmt.Sprintf(`SELECT * FROM %q.fencekit_check_floor(0, 5, false)`, e.schema))
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "22023", pe.Code)
	after, _ := e.seq()
	require.Equal(t, before, after)
	_, checked := e.floorRow()
	require.Equal(t, "1:1/00000001", checked, "nothing recorded")
}
