package pgguard_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/guards/guardtest"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/sql/migrations"
)

func TestMain(m *testing.M) {
	fencetest.SkipExamplesInShort() // they need PostgreSQL
	goleak.VerifyTestMain(m)
}

func bg() context.Context { return context.Background() }

// setupSchema creates a private schema with the Guard migrations and a
// table "guarded" standing for the user's data.
func setupSchema(t testing.TB) string {
	t.Helper()
	schema := fencetest.Schema(t, migrations.Guard)
	_, err := fencetest.Pool(t).Exec(bg(), fmt.Sprintf(
		`CREATE TABLE %q.guarded (resource text PRIMARY KEY, value text NOT NULL, token bigint NOT NULL)`, schema))
	require.NoError(t, err)
	return schema
}

func newGuard(t testing.TB, cfg pgguard.Config) *pgguard.Guard {
	t.Helper()
	g, err := pgguard.New(cfg)
	require.NoError(t, err)
	return g
}

func upsertSQL(schema string) string {
	return fmt.Sprintf(`INSERT INTO %q.guarded (resource, value, token) VALUES ($1, $2, $3)
ON CONFLICT (resource) DO UPDATE SET value = EXCLUDED.value, token = EXCLUDED.token`, schema)
}

// writeRow is a guarded write: it uses the transaction Fence hands over.
func writeRow(schema, resource, value string, token fence.Token) func(context.Context) error {
	return func(ctx context.Context) error {
		tx, ok := pgguard.TxFromContext(ctx)
		if !ok {
			return errors.New("no tx in ctx")
		}
		if got, ok := fence.FromContext(ctx); !ok || got != token {
			return fmt.Errorf("token in ctx = %v, %v", got, ok)
		}
		_, err := tx.Exec(ctx, upsertSQL(schema), resource, value, int64(token))
		return err
	}
}

func readRow(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, schema, resource string) (string, fence.Token, bool, error) {
	var v string
	var tok int64
	err := q.QueryRow(ctx, fmt.Sprintf(`SELECT value, token FROM %q.guarded WHERE resource = $1`, schema), resource).Scan(&v, &tok)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0, false, nil
	}
	return v, fence.Token(tok), err == nil, err
}

// counter counts the statements sent on one connection.
type counter struct {
	mu   sync.Mutex
	conn *pgx.Conn
	sqls []string
}

func (c *counter) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if conn == c.conn {
		c.sqls = append(c.sqls, strings.Fields(d.SQL)[0])
	}
	return ctx
}

func (c *counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *counter) start(conn *pgx.Conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.conn, c.sqls = conn, nil
}

func (c *counter) stop() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.sqls
	c.conn, c.sqls = nil, nil
	return out
}

func tracedPool(t *testing.T) (*pgxpool.Pool, *counter) {
	c := &counter{}
	return fencetest.PoolWith(t, fencetest.DatabaseURL(), func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = c }), c
}

// fenceCounted runs FenceTx in a fresh transaction on pool, commits on
// success, and returns the statements FenceTx sent.
func fenceCounted(t *testing.T, g *pgguard.Guard, pool *pgxpool.Pool, c *counter, r string, tok fence.Token) ([]string, error) {
	t.Helper()
	tx, err := pool.Begin(bg())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(bg()) }()
	c.start(tx.Conn())
	err = g.FenceTx(fence.WithClaim(bg(), cl(tok)), tx, r)
	sqls := c.stop()
	if err == nil {
		require.NoError(t, tx.Commit(bg()))
	}
	return sqls, err
}

// FenceTx is one statement on every ordinary path: fresh resource, higher,
// equal and stale (a stale refusal then rolls the transaction back).
func TestFenceTxIsOneStatement(t *testing.T) {
	schema := setupSchema(t)
	pool, c := tracedPool(t)
	g := newGuard(t, pgguard.Config{Schema: schema, DB: pool})
	for _, step := range []struct {
		tok   fence.Token
		stale bool
	}{{5, false}, {8, false}, {8, false}, {6, true}, {9, false}} {
		sqls, err := fenceCounted(t, g, pool, c, "r", step.tok)
		if step.stale {
			se, ok := fence.IsStale(err)
			require.True(t, ok, "%v", err)
			assert.Equal(t, fence.Token(8), se.Highest)
			assert.Equal(t, []string{"INSERT", "rollback"}, sqls, "stale: one statement, then the rollback")
		} else {
			require.NoError(t, err)
			assert.Equal(t, []string{"INSERT"}, sqls, "token %d", step.tok)
		}
	}
	mark, err := newGuard(t, pgguard.Config{Schema: schema, DB: pool}).Mark(bg(), "r")
	require.NoError(t, err)
	assert.Equal(t, fence.Token(9), mark.Token)
}

// Bad input is refused before any I/O and leaves the caller's tx usable.
func TestFenceTxBadInput(t *testing.T) {
	schema := setupSchema(t)
	pool, c := tracedPool(t)
	g := newGuard(t, pgguard.Config{Schema: schema, DB: pool})
	tx, err := pool.Begin(bg())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(bg()) }()
	c.start(tx.Conn())
	assert.ErrorIs(t, g.FenceTx(fence.WithClaim(bg(), cl(0)), tx, "r"), fence.ErrInvalidToken)
	assert.ErrorIs(t, g.FenceTx(fence.WithClaim(bg(), cl(-9)), tx, "r"), fence.ErrInvalidToken)
	assert.ErrorIs(t, g.FenceTx(fence.WithClaim(bg(), cl(1)), tx, ""), fence.ErrInvalidResource)
	assert.ErrorIs(t, g.FenceTx(fence.WithClaim(bg(), cl(1)), tx, "a\x00b"), fence.ErrInvalidResource)
	assert.ErrorIs(t, g.FenceTx(fence.WithClaim(bg(), cl(1)), tx, strings.Repeat("x", 513)), fence.ErrInvalidResource)
	assert.ErrorIs(t, g.FenceTx(fence.WithClaim(bg(), cl(1)), nil, "r"), fence.ErrNilArgument)
	assert.Empty(t, c.stop(), "bad input must not reach the database")
	require.NoError(t, g.FenceTx(fence.WithClaim(bg(), cl(1)), tx, "r"), "tx still usable")
	require.NoError(t, tx.Commit(bg()))

	gd := newGuard(t, pgguard.Config{Schema: schema, DB: pool})
	called := false
	w := func(context.Context) error { called = true; return nil }
	assert.ErrorIs(t, gd.Fence(bg(), "r", 0, w), fence.ErrInvalidToken)
	assert.ErrorIs(t, gd.Fence(bg(), "\xff", 3, w), fence.ErrInvalidResource)
	assert.ErrorIs(t, gd.Fence(bg(), "r", 3, nil), fence.ErrNilArgument)
	assert.False(t, called)
	_, err = gd.Mark(bg(), "")
	assert.ErrorIs(t, err, fence.ErrInvalidResource)
	mark, err := gd.Mark(bg(), "r")
	require.NoError(t, err)
	assert.Equal(t, fence.Token(1), mark.Token)
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, schema := range []string{
		`public"; DROP TABLE fencekit_guard_marks; --`,
		`x"."y`, "Public", "pg_catalog", "a b", "a-b", "1abc", "sch;ema", "é",
		strings.Repeat("s", 64),
	} {
		_, err := pgguard.New(pgguard.Config{Schema: schema})
		assert.ErrorIs(t, err, fence.ErrInvalidConfig, "%q", schema)
		assert.ErrorIs(t, err, migrations.ErrInvalidIdentifier, "%q", schema)
	}
	for _, tc := range []struct {
		cfg   pgguard.Config
		field string
	}{
		{pgguard.Config{DB: noDB{t}, IsoLevel: pgx.ReadUncommitted}, "IsoLevel"},
		{pgguard.Config{DB: noDB{t}, IsoLevel: "read committed; drop table x"}, "IsoLevel"},
		{pgguard.Config{DB: noDB{t}, LockTimeout: 500 * time.Microsecond}, "LockTimeout"},
		{pgguard.Config{}, "DB"}, // neither DB nor SQLDB
	} {
		_, err := pgguard.New(tc.cfg)
		assert.ErrorIs(t, err, fence.ErrInvalidConfig, "%+v", tc.cfg)
		var ce *fence.ConfigError
		if assert.ErrorAs(t, err, &ce, "%+v", tc.cfg) {
			assert.Equal(t, tc.field, ce.Field)
		}
	}
	g, err := pgguard.New(pgguard.Config{DB: noDB{t}})
	require.NoError(t, err)
	assert.Equal(t, "public", g.Schema())
}

// noDB is a DB and SQLDB that fails the test when used.
type noDB struct{ t *testing.T }

func (d noDB) BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error) {
	d.t.Error("BeginTx reached the database")
	return nil, errors.New("noDB")
}

func (d noDB) QueryRow(context.Context, string, ...any) pgx.Row {
	d.t.Error("QueryRow reached the database")
	return nil
}

type noSQLDB struct{ t *testing.T }

func (d noSQLDB) BeginTx(context.Context, *sql.TxOptions) (*sql.Tx, error) {
	d.t.Error("BeginTx reached the database")
	return nil, errors.New("noSQLDB")
}

func (d noSQLDB) QueryRowContext(context.Context, string, ...any) *sql.Row {
	d.t.Error("QueryRowContext reached the database")
	return nil
}

// A method that needs the database the Config does not set returns a
// *fence.ConfigError naming it, before any I/O; the database-free checks come
// first.
func TestMethodNeedsItsDatabase(t *testing.T) {
	ctx := fence.WithToken(bg(), 3)
	nop := func(context.Context, pgx.Tx) error { return nil }
	sqlNop := func(context.Context, *sql.Tx) error { return nil }
	field := func(err error) string {
		var ce *fence.ConfigError
		require.ErrorAs(t, err, &ce)
		require.ErrorIs(t, err, fence.ErrInvalidConfig)
		return ce.Field
	}

	pgxOnly, err := pgguard.New(pgguard.Config{DB: noDB{t}})
	require.NoError(t, err)
	assert.Equal(t, "SQLDB", field(pgxOnly.InSQLTx(ctx, "r", sqlNop)))
	assert.Equal(t, "SQLDB", field(pgxOnly.InSQLTx(fence.WithClaim(bg(), cl(3)), "r", sqlNop)))
	assert.ErrorIs(t, pgxOnly.InSQLTx(bg(), "r", sqlNop), fence.ErrNoToken, "input first")

	sqlOnly, err := pgguard.New(pgguard.Config{SQLDB: noSQLDB{t}})
	require.NoError(t, err)
	assert.Equal(t, "DB", field(sqlOnly.InTx(ctx, "r", nop)))
	assert.Equal(t, "DB", field(sqlOnly.InTx(fence.WithClaim(bg(), cl(3)), "r", nop)))
	_, err = sqlOnly.Begin(ctx, "r")
	assert.Equal(t, "DB", field(err))
	_, err = sqlOnly.Begin(fence.WithClaim(bg(), cl(3)), "r")
	assert.Equal(t, "DB", field(err))
	assert.ErrorIs(t, sqlOnly.InTx(ctx, "", nop), fence.ErrInvalidResource, "input first")
	assert.ErrorIs(t, sqlOnly.InTx(ctx, "r", nil), fence.ErrNilArgument, "input first")
}

// A Guard with only Config.SQLDB implements fence.Guard and Mark on it: the
// write sees the *sql.Tx (SQLTxFromContext), not a pgx.Tx.
func TestFenceAndMarkOnSQLDB(t *testing.T) {
	schema := setupSchema(t)
	g := newGuard(t, pgguard.Config{Schema: schema, SQLDB: sqlDB(t)})
	write := func(v string, tok fence.Token) func(context.Context) error {
		return func(ctx context.Context) error {
			if _, ok := pgguard.TxFromContext(ctx); ok {
				return errors.New("a pgx.Tx in the ctx of a database/sql Fence")
			}
			tx, ok := pgguard.SQLTxFromContext(ctx)
			if !ok {
				return errors.New("no *sql.Tx in ctx")
			}
			if got, ok := fence.FromContext(ctx); !ok || got != tok {
				return errors.New("write's ctx lacks the token")
			}
			return sqlUpsert(ctx, tx, schema, "r", v, int64(tok), false)
		}
	}
	mark, err := g.Mark(bg(), "r")
	require.NoError(t, err)
	assert.Equal(t, fence.Claim{}, mark, "no mark yet")
	require.NoError(t, g.Fence(bg(), "r", 5, write("five", 5)))
	se, ok := fence.IsStale(g.Fence(bg(), "r", 4, write("four", 4)))
	require.True(t, ok)
	assert.Equal(t, fence.Token(5), se.Highest)
	mark, err = g.Mark(bg(), "r")
	require.NoError(t, err)
	assert.Equal(t, fence.Token(5), mark.Token)
	v, tok, found, err := readRow(bg(), fencetest.Pool(t), schema, "r")
	require.NoError(t, err)
	assert.True(t, found)
	assert.Equal(t, "five", v)
	assert.Equal(t, fence.Token(5), tok)
}

func TestMissingTable(t *testing.T) {
	schema := fencetest.Schema(t, migrations.Lease) // no guard table
	g := newGuard(t, pgguard.Config{Schema: schema, DB: fencetest.Pool(t)})
	err := g.Fence(bg(), "r", 1, func(context.Context) error { return nil })
	require.Error(t, err)
	assert.Contains(t, err.Error(), "migrations.Migrate")
	assert.NotErrorIs(t, err, fence.ErrBusy)
}

// The guarded write and the mark commit or roll back together.
func TestWriteAndMarkCommitTogether(t *testing.T) {
	schema := setupSchema(t)
	pool := fencetest.Pool(t)
	g := newGuard(t, pgguard.Config{Schema: schema, DB: pool})

	require.NoError(t, g.Fence(bg(), "r", 3, writeRow(schema, "r", "three", 3)))

	// write fails after writing its row: row and mark roll back.
	err := g.Fence(bg(), "r", 9, func(ctx context.Context) error {
		require.NoError(t, writeRow(schema, "r", "nine", 9)(ctx))
		return errInjected
	})
	assert.ErrorIs(t, err, errInjected)
	assertState(t, g, pool, schema, "r", 3, "three", true)

	// write panics: same.
	assert.Panics(t, func() {
		_ = g.Fence(bg(), "r", 10, func(ctx context.Context) error {
			require.NoError(t, writeRow(schema, "r", "ten", 10)(ctx))
			panic("write panicked")
		})
	})
	assertState(t, g, pool, schema, "r", 3, "three", true)

	// A SQL error in write aborts the tx: nothing commits.
	err = g.Fence(bg(), "r", 11, func(ctx context.Context) error {
		tx, _ := pgguard.TxFromContext(ctx)
		_, err := tx.Exec(ctx, "SELECT 1/0")
		return err
	})
	require.Error(t, err)
	assertState(t, g, pool, schema, "r", 3, "three", true)

	// Fresh resource, failing write: no mark row is created.
	err = g.Fence(bg(), "fresh", 50, func(ctx context.Context) error {
		require.NoError(t, writeRow(schema, "fresh", "x", 50)(ctx))
		return errInjected
	})
	assert.ErrorIs(t, err, errInjected)
	assertState(t, g, pool, schema, "fresh", 0, "", false)
	var n int
	require.NoError(t, pool.QueryRow(bg(), fmt.Sprintf(`SELECT count(*) FROM %q.fencekit_guard_marks WHERE resource = 'fresh'`, schema)).Scan(&n))
	assert.Zero(t, n)
}

func assertState(t *testing.T, g *pgguard.Guard, pool *pgxpool.Pool, schema, r string, mark fence.Token, value string, found bool) {
	t.Helper()
	m, err := g.Mark(bg(), r)
	require.NoError(t, err)
	assert.Equal(t, mark, m.Token, "mark of %q", r)
	v, _, ok, err := readRow(bg(), pool, schema, r)
	require.NoError(t, err)
	assert.Equal(t, found, ok, "row of %q present", r)
	assert.Equal(t, value, v, "row of %q", r)
}

// A stale FenceTx rolls back the caller's transaction, including the
// guarded row the caller wrote before fencing; the caller cannot commit it.
func TestStaleRollsBackCallerTx(t *testing.T) {
	schema := setupSchema(t)
	pool := fencetest.Pool(t)
	g := newGuard(t, pgguard.Config{Schema: schema, DB: pool})
	require.NoError(t, g.Fence(bg(), "r", 7, func(context.Context) error { return nil }))

	tx, err := pool.Begin(bg())
	require.NoError(t, err)
	_, err = tx.Exec(bg(), upsertSQL(schema), "r", "stale write", 5)
	require.NoError(t, err)
	err = g.FenceTx(fence.WithClaim(bg(), cl(5)), tx, "r")
	se, ok := fence.IsStale(err)
	require.True(t, ok, "%v", err)
	assert.Equal(t, fence.StaleError{Resource: "r", Presented: 5, Highest: 7}, *se)
	assert.ErrorIs(t, tx.Commit(bg()), pgx.ErrTxClosed, "a refused tx must not be committable")
	assertState(t, g, pool, schema, "r", 7, "", false)
}

// waitForLockWait polls pg_stat_activity until backend pid waits on a lock.
func waitForLockWait(t *testing.T, pool *pgxpool.Pool, pid uint32) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		var wait *string
		err := pool.QueryRow(bg(), `SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1`, int32(pid)).Scan(&wait)
		require.NoError(t, err)
		if wait != nil && *wait == "Lock" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend %d never waited on a lock", pid)
		}
		<-tick.C
	}
}

// A second holder's FenceTx waits on the mark's row lock until the first
// transaction ends, then decides on the committed outcome, in its one
// statement, and reports the exact mark even though the first transaction
// committed it after the waiter's statement snapshot.
func TestConcurrentHolderSerialises(t *testing.T) {
	for _, tc := range []struct {
		name       string
		initial    fence.Token // 0: resource fresh
		first      fence.Token
		commit     bool
		second     fence.Token
		wantStale  bool
		wantMark   fence.Token
		statements []string
	}{
		{"fresh, first commits, lower waiter stale", 0, 5, true, 4, true, 5, []string{"INSERT", "rollback"}},
		{"raised, first commits, lower waiter stale", 3, 5, true, 4, true, 5, []string{"INSERT", "rollback"}},
		{"raised above a mark the waiter is also below", 4, 9, true, 3, true, 9, []string{"INSERT", "rollback"}},
		{"first commits, higher waiter accepted", 3, 5, true, 6, false, 6, []string{"INSERT"}},
		{"first commits, equal waiter accepted", 3, 5, true, 5, false, 5, []string{"INSERT"}},
		{"first rolls back, lower waiter accepted", 3, 5, false, 4, false, 4, []string{"INSERT"}},
		{"fresh, first rolls back, waiter accepted", 0, 5, false, 4, false, 4, []string{"INSERT"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			schema := setupSchema(t)
			poolA := fencetest.Pool(t)
			poolB, c := tracedPool(t)
			observer := fencetest.Pool(t)
			g := newGuard(t, pgguard.Config{Schema: schema, DB: observer})
			if tc.initial > 0 {
				require.NoError(t, g.Fence(bg(), "r", tc.initial, func(context.Context) error { return nil }))
			}
			txA, err := poolA.Begin(bg())
			require.NoError(t, err)
			defer func() { _ = txA.Rollback(bg()) }()
			require.NoError(t, g.FenceTx(fence.WithClaim(bg(), cl(tc.first)), txA, "r"))

			txB, err := poolB.Begin(bg())
			require.NoError(t, err)
			defer func() { _ = txB.Rollback(bg()) }()
			pidB := txB.Conn().PgConn().PID()
			c.start(txB.Conn())
			res := make(chan error, 1)
			go func() { res <- g.FenceTx(fence.WithClaim(bg(), cl(tc.second)), txB, "r") }()
			waitForLockWait(t, observer, pidB)
			select {
			case err := <-res:
				t.Fatalf("second FenceTx returned while the first holder was open: %v", err)
			default:
			}
			if tc.commit {
				require.NoError(t, txA.Commit(bg()))
			} else {
				require.NoError(t, txA.Rollback(bg()))
			}
			err = <-res
			assert.Equal(t, tc.statements, c.stop())
			if tc.wantStale {
				se, ok := fence.IsStale(err)
				require.True(t, ok, "%v", err)
				assert.Equal(t, tc.second, se.Presented)
				assert.Equal(t, tc.first, se.Highest)
			} else {
				require.NoError(t, err)
				require.NoError(t, txB.Commit(bg()))
			}
			m, err := g.Mark(bg(), "r")
			require.NoError(t, err)
			assert.Equal(t, tc.wantMark, m.Token)
		})
	}
}

func requireCode(t *testing.T, err error, code string) {
	t.Helper()
	require.ErrorIs(t, err, fence.ErrBusy)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	assert.Equal(t, code, pgErr.Code)
	_, stale := fence.IsStale(err)
	assert.False(t, stale)
}

// A lock wait beyond Config.LockTimeout is ErrBusy; write is not called and
// the mark is unchanged.
func TestLockTimeoutIsBusy(t *testing.T) {
	schema := setupSchema(t)
	holder := fencetest.Pool(t)
	g := newGuard(t, pgguard.Config{Schema: schema, DB: fencetest.Pool(t), LockTimeout: 50 * time.Millisecond})
	require.NoError(t, g.Fence(bg(), "r", 2, func(context.Context) error { return nil }))
	tx, err := holder.Begin(bg())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(bg()) }()
	require.NoError(t, g.FenceTx(fence.WithClaim(bg(), cl(3)), tx, "r"))

	called := false
	err = g.Fence(bg(), "r", 4, func(context.Context) error { called = true; return nil })
	requireCode(t, err, "55P03")
	assert.False(t, called)
	require.NoError(t, tx.Rollback(bg()))
	m, err := g.Mark(bg(), "r")
	require.NoError(t, err)
	assert.Equal(t, fence.Token(2), m.Token)
}

// Two transactions fencing two resources in opposite order deadlock;
// PostgreSQL aborts one, which FenceTx reports as ErrBusy.
func TestDeadlockIsBusy(t *testing.T) {
	schema := setupSchema(t)
	poolA, poolB, observer := fencetest.Pool(t), fencetest.Pool(t), fencetest.Pool(t)
	g := newGuard(t, pgguard.Config{Schema: schema, DB: observer})
	txA, err := poolA.Begin(bg())
	require.NoError(t, err)
	defer func() { _ = txA.Rollback(bg()) }()
	txB, err := poolB.Begin(bg())
	require.NoError(t, err)
	defer func() { _ = txB.Rollback(bg()) }()
	require.NoError(t, g.FenceTx(fence.WithClaim(bg(), cl(1)), txA, "one"))
	require.NoError(t, g.FenceTx(fence.WithClaim(bg(), cl(1)), txB, "two"))
	resA := make(chan error, 1)
	go func() { resA <- g.FenceTx(fence.WithClaim(bg(), cl(2)), txA, "two") }()
	waitForLockWait(t, observer, txA.Conn().PgConn().PID())
	errB := g.FenceTx(fence.WithClaim(bg(), cl(2)), txB, "one")
	errA := <-resA
	// Exactly one of them is the deadlock victim; the other proceeds.
	if errA == nil {
		requireCode(t, errB, "40P01")
	} else {
		requireCode(t, errA, "40P01")
		assert.NoError(t, errB)
	}
}

// Under REPEATABLE READ and SERIALIZABLE, a mark changed after the
// transaction's snapshot makes FenceTx fail with ErrBusy (40001), even for a
// higher token: retry the whole transaction. Under READ COMMITTED the same
// sequence is accepted.
func TestSnapshotIsolationConflictIsBusy(t *testing.T) {
	schema := setupSchema(t)
	pool := fencetest.Pool(t)
	g := newGuard(t, pgguard.Config{Schema: schema, DB: fencetest.Pool(t)})
	for i, iso := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable, pgx.ReadCommitted} {
		r := fmt.Sprintf("r%d", i)
		require.NoError(t, g.Fence(bg(), r, 1, func(context.Context) error { return nil }))
		tx, err := pool.BeginTx(bg(), pgx.TxOptions{IsoLevel: iso})
		require.NoError(t, err)
		_, err = tx.Exec(bg(), "SELECT 1") // takes the snapshot
		require.NoError(t, err)
		require.NoError(t, g.Fence(bg(), r, 9, func(context.Context) error { return nil }))
		err = g.FenceTx(fence.WithClaim(bg(), cl(10)), tx, r)
		if iso == pgx.ReadCommitted {
			require.NoError(t, err)
			require.NoError(t, tx.Commit(bg()))
			continue
		}
		requireCode(t, err, "40001")
		assert.ErrorIs(t, tx.Commit(bg()), pgx.ErrTxClosed)
		m, err := g.Mark(bg(), r)
		require.NoError(t, err)
		assert.Equal(t, fence.Token(9), m.Token, "%s", iso)
	}
}

// Fence is bounded by ctx: a wait cancelled with a cause (as a lost lease
// cancels its context) returns an error matching context.Canceled and the
// cause, not fence.ErrBusy; write is not called and nothing changes.
func TestFenceContextCancelWhileWaiting(t *testing.T) {
	schema := setupSchema(t)
	holder, observer := fencetest.Pool(t), fencetest.Pool(t)
	waiter := fencetest.Pool(t)
	g := newGuard(t, pgguard.Config{Schema: schema, DB: waiter, LockTimeout: -1})
	tx, err := holder.Begin(bg())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(bg()) }()
	require.NoError(t, g.FenceTx(fence.WithClaim(bg(), cl(3)), tx, "r"))

	errLost := errors.New("lease lost (test cause)")
	ctx, cancel := context.WithCancelCause(bg())
	defer cancel(nil)
	called := false
	res := make(chan error, 1)
	go func() {
		res <- g.Fence(ctx, "r", 4, func(context.Context) error { called = true; return nil })
	}()
	// Wait until some backend of the waiter pool waits on the lock (in the
	// simple_protocol exec mode the batch is one query text, BEGIN first).
	deadline := time.Now().Add(15 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		var n int
		require.NoError(t, observer.QueryRow(bg(), `SELECT count(*) FROM pg_stat_activity
WHERE wait_event_type = 'Lock' AND query LIKE '%INSERT INTO%' AND strpos(query, $1) > 0`, schema).Scan(&n))
		if n > 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "waiter never blocked")
		<-tick.C
	}
	cancel(errLost)
	err = <-res
	assert.NotErrorIs(t, err, fence.ErrBusy, "a write whose ctx ended is not retryable")
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, err, errLost, "the error names why ctx ended")
	assert.False(t, called)
	require.NoError(t, tx.Rollback(bg()))
	gm := newGuard(t, pgguard.Config{Schema: schema, DB: observer})
	m, err := gm.Mark(bg(), "r")
	require.NoError(t, err)
	assert.Equal(t, fence.Token(0), m.Token)
}

// naiveSubject is the two-winners bug on PostgreSQL: it reads the mark,
// decides in Go, then upserts the mark unconditionally. The kit must catch
// it against the real database.
type naiveSubject struct {
	schema string
	pools  []*pgxpool.Pool
	next   atomic.Uint64
	reader *pgxpool.Pool
}

func (s *naiveSubject) Read(ctx context.Context, r string) (string, fence.Token, bool, error) {
	return readRow(ctx, s.reader, s.schema, r)
}

func (s *naiveSubject) Write(ctx context.Context, r string, tok fence.Token, v string) error {
	if err := fence.CheckArgs(r, tok); err != nil {
		return err
	}
	pool := s.pools[s.next.Add(1)%uint64(len(s.pools))]
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var cur int64
	err = tx.QueryRow(ctx, fmt.Sprintf(`SELECT highest_token FROM %q.fencekit_guard_marks WHERE resource = $1`, s.schema), r).Scan(&cur)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	if err := fence.Decide(r, tok, fence.Token(cur)); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %q.fencekit_guard_marks (resource, highest_token) VALUES ($1, $2)
ON CONFLICT (resource) DO UPDATE SET highest_token = EXCLUDED.highest_token`, s.schema), r, int64(tok)); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, upsertSQL(s.schema), r, v, int64(tok)); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func TestKitCatchesNaivePostgresGuard(t *testing.T) {
	s := &naiveSubject{schema: setupSchema(t), reader: fencetest.Pool(t)}
	for range 4 {
		s.pools = append(s.pools, fencetest.Pool(t))
	}
	cfg, err := guardtest.Config{}.WithDefaults()
	require.NoError(t, err)
	runs := 0
	for ; runs < 20 && err == nil; runs++ {
		err = guardtest.CheckConcurrent(bg(), s, cfg)
	}
	require.Error(t, err, "select-then-upsert passed %d concurrent runs", runs)
	t.Logf("caught after %d run(s): %.300s", runs, err)
}

// cl is the claim of token tok with no run identity.
func cl(tok fence.Token) fence.Claim { return fence.Claim{Token: tok} }
