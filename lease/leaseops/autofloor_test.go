package leaseops_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/internal/obs/obstest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/internal/leasemetrics"
	"github.com/fencekit/fencekit/lease/leaseops"
	"github.com/fencekit/fencekit/sql/migrations"
)

// next is the next value the schema's sequence would issue.
func (e *env) next() int64 {
	last, called := e.seq()
	if called {
		return last + 1
	}
	return last
}

// floorRow is the stored floor and the checked node.
func (e *env) floorRow() (fence.Token, string) {
	e.t.Helper()
	var f int64
	var n *string
	require.NoError(e.t, e.raw.QueryRow(bg(), fmt.Sprintf(`SELECT floor, checked_node FROM %q.fencekit_token_floor`, e.schema)).Scan(&f, &n))
	if n == nil {
		return fence.Token(f), ""
	}
	return fence.Token(f), *n
}

// TestAutomaticFloorCheck: a Manager with a floor source grants on a node
// whose floor was not checked in the same Acquire or Takeover call, after
// checking the floor itself (the refused statement is counted, the check
// is logged at Info); tokens are above the source's floor. Without a source
// it fails closed exactly as before; a source that fails leaves grants
// refused (ErrFailoverUnchecked and ErrFloorCheck) and changes nothing.
func TestAutomaticFloorCheck(t *testing.T) {
	t.Run("acquire", func(t *testing.T) {
		e := newEnv(t)
		mt := obstest.NewMeter(t)
		logs, logger := obstest.NewLogs()
		m := e.manager(lease.Config{MeterProvider: mt.Provider, Logger: logger,
			Floor: lease.FloorConfig{Source: lease.StaticFloor(500)}})
		node := e.checkedNode()
		e.otherNode()
		l, err := m.Acquire(bg(), uniqueKey(t))
		require.NoError(t, err, "granted in the same call")
		require.Greater(t, l.Token(), fence.Token(500))
		stored, checked := e.floorRow()
		require.Equal(t, node, checked)
		require.EqualValues(t, 500, stored)
		require.EqualValues(t, 1, obstest.Value(mt.Collect(), leasemetrics.Refused, map[string]string{"reason": leasemetrics.ReasonFailoverUnchecked}))
		require.Empty(t, logs.AtLeast(slog.LevelError))
		var found bool
		for _, r := range logs.AtLeast(slog.LevelInfo) {
			found = found || r.Message == "lease: token floor checked automatically; grants resume on this node"
		}
		require.True(t, found, "the check is logged")
		_, err = l.Release(bg())
		require.NoError(t, err)
	})
	t.Run("takeover", func(t *testing.T) {
		e := newEnv(t)
		m := e.manager(lease.Config{Floor: lease.FloorConfig{Source: lease.StaticFloor(40)}})
		e.otherNode()
		l, err := m.Takeover(bg(), uniqueKey(t))
		require.NoError(t, err)
		require.Greater(t, l.Token(), fence.Token(40))
		_, err = l.Release(bg())
		require.NoError(t, err)
	})
	t.Run("token floor on the checked node", func(t *testing.T) {
		e := newEnv(t)
		m := e.manager(lease.Config{Floor: lease.FloorConfig{Source: lease.StaticFloor(1)}})
		_, err := e.floor(lease.StaticFloor(10_000)).Check(bg())
		require.ErrorIs(t, err, lease.ErrTokenFloor, "the stored floor is now above the sequence")
		l, err := m.Acquire(bg(), uniqueKey(t))
		require.NoError(t, err, "the automatic check advances the sequence")
		require.Greater(t, l.Token(), fence.Token(10_000))
	})
	t.Run("gap", func(t *testing.T) {
		e := newEnv(t)
		m := e.manager(lease.Config{Floor: lease.FloorConfig{Source: lease.StaticFloor(1), Gap: 1000}})
		l, err := m.Acquire(bg(), uniqueKey(t))
		require.NoError(t, err)
		before := l.Token()
		l2, err := m.Acquire(bg(), uniqueKey(t))
		require.NoError(t, err)
		require.Less(t, l2.Token(), before+1000, "no jump on the checked node")
		e.otherNode()
		l3, err := m.Acquire(bg(), uniqueKey(t))
		require.NoError(t, err)
		require.Greater(t, l3.Token(), l2.Token()+999, "the first check after a node change jumps by the gap")
		l4, err := m.Acquire(bg(), uniqueKey(t))
		require.NoError(t, err)
		require.Less(t, l4.Token(), l3.Token()+1000, "once")
	})
	t.Run("no source fails closed", func(t *testing.T) {
		e := newEnv(t)
		m := e.manager(lease.Config{})
		e.otherNode()
		for range 3 {
			_, err := m.Acquire(bg(), uniqueKey(t))
			require.ErrorIs(t, err, lease.ErrFailoverUnchecked)
			require.NotErrorIs(t, err, lease.ErrFloorCheck)
		}
		_, checked := e.floorRow()
		require.Equal(t, "1:1/00000001", checked)
	})
	t.Run("source fails", func(t *testing.T) {
		e := newEnv(t)
		boom := errors.New("marks unreachable")
		m := e.manager(lease.Config{Floor: lease.FloorConfig{Source: lease.MaxFloor(lease.StaticFloor(7),
			func(context.Context) (fence.Token, error) { return 0, boom })}})
		e.otherNode()
		before := e.next()
		_, err := m.Acquire(bg(), uniqueKey(t))
		require.ErrorIs(t, err, lease.ErrFailoverUnchecked)
		require.ErrorIs(t, err, lease.ErrFloorCheck)
		require.ErrorIs(t, err, boom)
		stored, checked := e.floorRow()
		require.Equal(t, "1:1/00000001", checked, "nothing recorded")
		require.Zero(t, stored, "the floor is unchanged")
		require.Equal(t, before+1, e.next(), "only the refused statement drew a value")
	})
}

// TestAutomaticFloorCheckLeastPrivilege: the application role of
// docs/operations.md (no ownership, no UPDATE on the floor table, no
// setval) recovers grants on an unchecked node by itself once granted
// EXECUTE on fencekit_check_floor, including when the sequence must be
// advanced; without that grant the refusal says what to grant. A temporary
// table of the role named like the floor table does not redirect the
// function.
func TestAutomaticFloorCheckLeastPrivilege(t *testing.T) {
	e := newEnv(t)
	role := fencetest.RandomName("fk_role_")
	_, err := e.raw.Exec(bg(), `CREATE ROLE `+role+` LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOBYPASSRLS NOREPLICATION`)
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, s := range []string{"DROP OWNED BY " + role, "DROP ROLE IF EXISTS " + role} {
			if _, err := e.raw.Exec(context.Background(), s); err != nil {
				t.Errorf("%s: %v", s, err)
			}
		}
	})
	for _, s := range []string{
		`GRANT USAGE ON SCHEMA %q TO ` + role,
		`GRANT SELECT, INSERT, UPDATE ON %q.fencekit_leases TO ` + role,
		`GRANT SELECT, INSERT, UPDATE ON %[1]q.fencekit_managers, %[1]q.fencekit_displaced TO ` + role,
		`GRANT USAGE, SELECT ON SEQUENCE %q.fencekit_token_seq TO ` + role,
	} {
		e.exec(s)
	}
	app := fencetest.PoolWith(t, fencetest.DatabaseURL(), func(c *pgxpool.Config) { c.ConnConfig.User = role })
	var owner bool
	require.NoError(t, app.QueryRow(bg(), `SELECT pg_has_role(current_user, (SELECT nspowner FROM pg_namespace WHERE nspname = $1), 'MEMBER')`, e.schema).Scan(&owner))
	require.False(t, owner, "the application role does not own the schema")
	m := e.manager(lease.Config{Pool: app, Floor: lease.FloorConfig{Source: lease.StaticFloor(300)}})

	e.otherNode()
	_, err = m.Acquire(bg(), uniqueKey(t))
	require.ErrorIs(t, err, lease.ErrFailoverUnchecked)
	require.ErrorIs(t, err, lease.ErrFloorCheck)
	require.ErrorContains(t, err, "GRANT EXECUTE ON FUNCTION")

	e.exec(`GRANT EXECUTE ON FUNCTION %q.fencekit_check_floor(bigint, bigint) TO ` + role)
	// A temporary table shadowing the floor table on the role's session
	// must not be what the function reads or writes.
	conn, err := app.Acquire(bg())
	require.NoError(t, err)
	_, err = conn.Exec(bg(), `CREATE TEMP TABLE fencekit_token_floor (id boolean, floor bigint, checked_node text, updated_at timestamptz)`)
	require.NoError(t, err)
	_, err = conn.Exec(bg(), `INSERT INTO pg_temp.fencekit_token_floor VALUES (true, 0, '', now())`)
	require.NoError(t, err)
	rep, err := leaseops.CheckFloor(bg(), conn, e.schema, lease.FloorConfig{Source: lease.StaticFloor(300)})
	conn.Release()
	require.NoError(t, err)
	require.Positive(t, rep.AdvancedFrom, "the sequence was behind 300 and was advanced")
	require.EqualValues(t, 301, rep.Next)
	stored, checked := e.floorRow()
	require.EqualValues(t, 300, stored, "the real floor table was written")
	require.Equal(t, rep.Node, checked)

	e.otherNode()
	l, err := m.Acquire(bg(), uniqueKey(t))
	require.NoError(t, err, "the application role's Manager recovers by itself")
	require.Greater(t, l.Token(), fence.Token(300))
	_, err = l.Release(bg())
	require.NoError(t, err)

	for _, s := range []string{
		fmt.Sprintf(`UPDATE %q.fencekit_token_floor SET checked_node = NULL`, e.schema),
		fmt.Sprintf(`SELECT setval('%s.fencekit_token_seq', 1)`, e.schema),
	} {
		_, err = app.Exec(bg(), s)
		require.Error(t, err, "the application role cannot %s", s)
	}
}

// TestAutomaticFloorCheckConcurrent: ten node changes, each with a higher
// floor source; after each, four processes acquire at once on their own
// pools, so their automatic checks race each other (the function's fast
// path retried on 40001, its locked advance). Every acquisition succeeds in
// its call, every token is above the floor of that change, none is issued
// twice.
func TestAutomaticFloorCheckConcurrent(t *testing.T) {
	e := newEnv(t)
	var src atomic.Int64
	source := func(context.Context) (fence.Token, error) { return fence.Token(src.Load()), nil }
	const workers, perChange, changes = 4, 3, 10
	var ms []*lease.Manager
	for range workers {
		ms = append(ms, e.manager(lease.Config{Floor: lease.FloorConfig{Source: source}}))
	}
	var (
		mu     sync.Mutex
		tokens = map[fence.Token]bool{}
		dup    []fence.Token
		below  []string
	)
	for i := 1; i <= changes; i++ {
		floor := fence.Token(i * 1000)
		src.Store(int64(floor))
		e.exec(`UPDATE %q.fencekit_token_floor SET checked_node = $1`, fmt.Sprintf("1:1/%08d", i))
		var wg sync.WaitGroup
		errs := make(chan error, workers*perChange)
		for w, m := range ms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range perChange {
					l, err := m.Acquire(bg(), lease.Key{AccountID: fmt.Sprintf("w%d", w), SessionID: fmt.Sprintf("%d-%d", i, j)})
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					if tokens[l.Token()] {
						dup = append(dup, l.Token())
					}
					tokens[l.Token()] = true
					if l.Token() <= floor {
						below = append(below, fmt.Sprintf("%d <= %d", l.Token(), floor))
					}
					mu.Unlock()
					if _, err := l.Release(bg()); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
	}
	require.Empty(t, dup, "re-issued tokens")
	require.Empty(t, below, "grants at or below the floor of their change")
	require.Len(t, tokens, workers*perChange*changes)
}

// TestCheckFloor: the operator function. Bad arguments and a failing
// source return errors and change nothing; with the guards' marks as the
// source it advances a sequence left behind and records the node; run
// again it changes nothing.
func TestCheckFloor(t *testing.T) {
	e := newEnv(t)
	e.otherNode()
	before := e.next()
	boom := errors.New("boom")
	for name, call := range map[string]func() error{
		"nil db": func() error {
			_, err := leaseops.CheckFloor(bg(), nil, e.schema, lease.FloorConfig{Source: lease.StaticFloor(0)})
			return err
		},
		"no source": func() error { _, err := leaseops.CheckFloor(bg(), e.raw, e.schema, lease.FloorConfig{}); return err },
		"gap without a source": func() error {
			_, err := leaseops.CheckFloor(bg(), e.raw, e.schema, lease.FloorConfig{Gap: 10})
			return err
		},
		"bad schema": func() error {
			_, err := leaseops.CheckFloor(bg(), e.raw, "x;drop", lease.FloorConfig{Source: lease.StaticFloor(0)})
			return err
		},
		"negative gap": func() error {
			_, err := leaseops.CheckFloor(bg(), e.raw, e.schema, lease.FloorConfig{Source: lease.StaticFloor(0), Gap: -1})
			return err
		},
	} {
		err := call()
		if name == "nil db" {
			require.ErrorIs(t, err, fence.ErrNilArgument, name)
			continue
		}
		var ce *fence.ConfigError
		require.ErrorAs(t, err, &ce, name)
		require.Equal(t, "leaseops", ce.Source, name)
		require.ErrorIs(t, err, fence.ErrInvalidConfig, name)
	}
	_, err := leaseops.CheckFloor(bg(), e.raw, e.schema, lease.FloorConfig{Source: func(context.Context) (fence.Token, error) { return 0, boom }})
	require.ErrorIs(t, err, boom)
	_, err = leaseops.CheckFloor(bg(), e.raw, e.schema, lease.FloorConfig{Source: lease.StaticFloor(-5)})
	require.ErrorContains(t, err, "negative floor")
	_, err = leaseops.CheckFloor(bg(), e.raw, fencetest.Schema(t, migrations.Guard), lease.FloorConfig{Source: lease.StaticFloor(0)})
	require.ErrorContains(t, err, "lacks the token floor check function")
	require.Equal(t, before, e.next())
	stored, checked := e.floorRow()
	require.Zero(t, stored)
	require.Equal(t, "1:1/00000001", checked, "nothing recorded")

	gs := fencetest.Schema(t, migrations.Guard)
	g, err := pgguard.New(pgguard.Config{DB: e.raw, Schema: gs})
	require.NoError(t, err)
	marks, err := pgguard.NewMarks(pgguard.MarksConfig{DB: e.raw, Schema: gs})
	require.NoError(t, err)
	c := fence.Claim{Token: 77, Run: "r"}
	require.NoError(t, g.Fence(fence.WithClaim(bg(), c), "doc", c.Token, func(context.Context) error { return nil }))
	rep, err := leaseops.CheckFloor(bg(), e.raw, e.schema, lease.FloorConfig{Source: lease.MaxFloor(marks.Highest, lease.StaticFloor(3))})
	require.NoError(t, err)
	require.EqualValues(t, 77, rep.Source)
	require.EqualValues(t, 77, rep.Stored)
	require.EqualValues(t, 78, rep.Next)
	require.EqualValues(t, before, rep.AdvancedFrom)
	require.Equal(t, "1:1/00000001", rep.CheckedBefore)
	require.Equal(t, e.checkedNode(), rep.Node)
	require.True(t, rep.OK())

	again, err := leaseops.CheckFloor(bg(), e.raw, e.schema, lease.FloorConfig{Source: marks.Highest, Gap: 1000})
	require.NoError(t, err)
	require.Zero(t, again.AdvancedFrom, "same node: no advance, no gap")
	require.Equal(t, rep.Next, again.Next)
}

// TestAutomaticFloorCheckFromMarks: the floor source is the PostgreSQL
// guard's marks in another database (pgguard.Marks.Highest): grants on the
// unchecked node resume above the highest mark. A marks schema without the
// marks table leaves grants refused with an error naming the table.
func TestAutomaticFloorCheckFromMarks(t *testing.T) {
	e := newEnv(t)
	marksDB := database(t) // another database, as a surviving cluster would be
	_, err := migrations.Migrate(bg(), marksDB, migrations.Options{Schema: "guards"}, migrations.Guard)
	require.NoError(t, err)
	g, err := pgguard.New(pgguard.Config{DB: marksDB, Schema: "guards"})
	require.NoError(t, err)
	c := fence.Claim{Token: 900, Run: "r"}
	require.NoError(t, g.Fence(fence.WithClaim(bg(), c), "doc", c.Token, func(context.Context) error { return nil }))

	noMarks, err := pgguard.NewMarks(pgguard.MarksConfig{DB: marksDB, Schema: "nope"})
	require.NoError(t, err)
	marks, err := pgguard.NewMarks(pgguard.MarksConfig{DB: marksDB, Schema: "guards"})
	require.NoError(t, err)
	wrong := e.manager(lease.Config{Floor: lease.FloorConfig{Source: noMarks.Highest}})
	m := e.manager(lease.Config{Floor: lease.FloorConfig{Source: marks.Highest}})
	e.otherNode()
	_, err = wrong.Acquire(bg(), uniqueKey(t))
	require.ErrorIs(t, err, lease.ErrFailoverUnchecked)
	require.ErrorIs(t, err, lease.ErrFloorCheck)
	require.ErrorContains(t, err, "fencekit_guard_marks")
	l, err := m.Acquire(bg(), uniqueKey(t))
	require.NoError(t, err)
	require.Greater(t, l.Token(), fence.Token(900))
	_, err = l.Release(bg())
	require.NoError(t, err)
}
