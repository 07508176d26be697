package pgguard_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/sql/migrations"
)

// setupRowsTable creates a private schema with a table that keeps its own
// token and run identity (no marks table).
func setupRowsTable(t testing.TB) string {
	t.Helper()
	schema := fencetest.Schema(t, migrations.Guard)
	_, err := fencetest.Pool(t).Exec(bg(), fmt.Sprintf(`CREATE TABLE %q.docs (
		resource text PRIMARY KEY, value text NOT NULL,
		fence_token bigint NOT NULL, fence_run text NOT NULL DEFAULT '')`, schema))
	require.NoError(t, err)
	return schema
}

func newRows(t testing.TB, schema string, mod func(*pgguard.RowsConfig)) *pgguard.Rows {
	t.Helper()
	cfg := pgguard.RowsConfig{Schema: schema, Table: "docs", Key: []string{"resource"},
		Columns: []string{"value"}, RunColumn: "fence_run"}
	if mod != nil {
		mod(&cfg)
	}
	r, err := pgguard.NewRows(cfg)
	require.NoError(t, err)
	return r
}

func readDoc(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, schema, r string) (string, fence.Token, bool, error) {
	var v string
	var tok int64
	err := q.QueryRow(ctx, fmt.Sprintf(`SELECT value, fence_token FROM %q.docs WHERE resource = $1`, schema), r).Scan(&v, &tok)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0, false, nil
	}
	return v, fence.Token(tok), err == nil, err
}

// rowsSubject: in-row mode through pgx. A plain write is one autocommit
// statement on a pool; a failing write runs in a transaction that is
// rolled back after the guarded upsert. The held write is one autocommit
// statement whose reply is held.
func rowsSubject(t *testing.T) *heldSubject {
	schema := setupRowsTable(t)
	rows := newRows(t, schema, nil)
	strict := newRows(t, schema, func(c *pgguard.RowsConfig) { c.Strict = true })
	rr := newRoundRobin(t, 4)
	reader := fencetest.Pool(t)
	write := func(rows *pgguard.Rows) writeFunc {
		return func(ctx context.Context, r string, c *fence.Claim, v string, fail bool) error {
			var q pgguard.Querier = rr.pool()
			if fail {
				tx, err := rr.pool().Begin(ctx)
				if err != nil {
					return fence.WrapContext(ctx, err)
				}
				defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
				q = tx
			}
			var err error
			if c == nil {
				err = rows.Upsert(ctx, q, []any{r}, v)
			} else {
				err = rows.Upsert(fence.WithClaim(ctx, *c), q, []any{r}, v)
			}
			if err == nil && fail {
				return errInjected
			}
			return err
		}
	}
	h := newReplyHold(t)
	return &heldSubject{
		subject: &subject{
			write:  write(rows),
			strict: write(strict),
			read: func(ctx context.Context, r string) (string, fence.Token, bool, error) {
				return readDoc(ctx, reader, schema, r)
			},
		},
		held: func(ctx context.Context, r string, tok fence.Token, v string, applied func()) error {
			// The connection is taken before the hold: the statement is
			// then the only request whose reply the proxy holds.
			conn, err := h.pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			return h.run(applied, func(hold func()) error {
				hold()
				return rows.Upsert(fence.WithClaim(ctx, fence.ClaimFor(ctx, tok)), conn, []any{r}, v)
			})
		},
	}
}

func TestConformanceRows(t *testing.T) {
	runKit(t, rowsSubject(t))
}

// In-row mode through database/sql, four independent *sql.DB.
func TestConformanceRowsSQL(t *testing.T) {
	schema := setupRowsTable(t)
	rows := newRows(t, schema, nil)
	strict := newRows(t, schema, func(c *pgguard.RowsConfig) { c.Strict = true })
	dbs := []*sql.DB{sqlDB(t), sqlDB(t), sqlDB(t), sqlDB(t)}
	var next atomic.Uint64
	reader := fencetest.Pool(t)
	write := func(rows *pgguard.Rows) writeFunc {
		return func(ctx context.Context, r string, c *fence.Claim, v string, fail bool) error {
			db := dbs[next.Add(1)%uint64(len(dbs))]
			var q pgguard.SQLQuerier = db
			if fail {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					return fence.WrapContext(ctx, err)
				}
				defer func() { _ = tx.Rollback() }()
				q = tx
			}
			var err error
			if c == nil {
				err = rows.UpsertSQL(ctx, q, []any{r}, v)
			} else {
				err = rows.UpsertSQL(fence.WithClaim(ctx, *c), q, []any{r}, v)
			}
			if err == nil && fail {
				return errInjected
			}
			return err
		}
	}
	h := newReplyHold(t)
	runKit(t, &heldSubject{
		subject: &subject{
			write:  write(rows),
			strict: write(strict),
			read: func(ctx context.Context, r string) (string, fence.Token, bool, error) {
				return readDoc(ctx, reader, schema, r)
			},
		},
		held: func(ctx context.Context, r string, tok fence.Token, v string, applied func()) error {
			// Taken before the hold, as above. A pooled connection that an
			// earlier held write cut can come back as driver.ErrBadConn from
			// database/sql's own retries: nothing was sent yet, so take
			// another rather than report the harness's error as the write's.
			conn, err := h.db.Conn(ctx)
			for i := 0; errors.Is(err, driver.ErrBadConn) && i < 3; i++ {
				conn, err = h.db.Conn(ctx)
			}
			if err != nil {
				return err
			}
			defer func() { _ = conn.Close() }()
			return h.run(applied, func(hold func()) error {
				hold()
				return rows.UpsertSQL(fence.WithClaim(ctx, fence.ClaimFor(ctx, tok)), conn, []any{r}, v)
			})
		},
	})
}

// A stale in-row write is one statement that changes no row, then one read
// that names the mark; an admitted one is a single statement.
func TestRowsStatements(t *testing.T) {
	schema := setupRowsTable(t)
	rows := newRows(t, schema, nil)
	pool, c := tracedPool(t)
	conn, err := pool.Acquire(bg())
	require.NoError(t, err)
	defer conn.Release()
	c.start(conn.Conn())
	require.NoError(t, rows.Upsert(fence.WithClaim(bg(), cl(5)), conn, []any{"r"}, "five"))
	assert.Equal(t, []string{"INSERT"}, c.stop())
	c.start(conn.Conn())
	err = rows.Upsert(fence.WithClaim(bg(), cl(4)), conn, []any{"r"}, "four")
	assert.Equal(t, []string{"INSERT", "SELECT"}, c.stop())
	se, ok := fence.IsStale(err)
	require.True(t, ok, "%v", err)
	assert.Equal(t, fence.StaleError{Resource: "r", Presented: 4, Highest: 5}, *se)
	v, tok, _, err := readDoc(bg(), pool, schema, "r")
	require.NoError(t, err)
	assert.Equal(t, "five", v)
	assert.Equal(t, fence.Token(5), tok)
}

// A refused in-row write inside the caller's transaction rolls it back,
// with the caller's earlier writes.
func TestRowsStaleRollsBackCallerTx(t *testing.T) {
	schema := setupRowsTable(t)
	rows := newRows(t, schema, nil)
	pool := fencetest.Pool(t)
	require.NoError(t, rows.Upsert(fence.WithClaim(bg(), cl(7)), pool, []any{"r"}, "seven"))
	tx, err := pool.Begin(bg())
	require.NoError(t, err)
	_, err = tx.Exec(bg(), fmt.Sprintf(`INSERT INTO %q.docs (resource, value, fence_token) VALUES ('other', 'x', 1)`, schema))
	require.NoError(t, err)
	_, ok := fence.IsStale(rows.Upsert(fence.WithClaim(bg(), cl(6)), tx, []any{"r"}, "six"))
	require.True(t, ok)
	assert.ErrorIs(t, tx.Commit(bg()), pgx.ErrTxClosed, "a refused tx must not be committable")
	_, _, found, err := readDoc(bg(), pool, schema, "other")
	require.NoError(t, err)
	assert.False(t, found, "the caller's earlier write was rolled back")
}

// The mark lives in the row: deleting the row deletes the mark, and a
// stale writer can then insert again. A tombstone (a fenced write that
// marks the row deleted) keeps the mark and refuses it.
func TestRowsDeleteDropsMark(t *testing.T) {
	schema := setupRowsTable(t)
	pool := fencetest.Pool(t)
	_, err := pool.Exec(bg(), fmt.Sprintf(`ALTER TABLE %q.docs ADD COLUMN deleted boolean NOT NULL DEFAULT false`, schema))
	require.NoError(t, err)
	rows := newRows(t, schema, func(c *pgguard.RowsConfig) { c.Columns = []string{"value", "deleted"} })
	require.NoError(t, rows.Upsert(fence.WithClaim(bg(), cl(9)), pool, []any{"hard"}, "nine", false))
	_, err = pool.Exec(bg(), fmt.Sprintf(`DELETE FROM %q.docs WHERE resource = 'hard'`, schema))
	require.NoError(t, err)
	require.NoError(t, rows.Upsert(fence.WithClaim(bg(), cl(3)), pool, []any{"hard"}, "stale three", false),
		"with the row deleted, token 3 is admitted again: this is what deleting a row allows")

	require.NoError(t, rows.Upsert(fence.WithClaim(bg(), cl(9)), pool, []any{"soft"}, "nine", false))
	require.NoError(t, rows.Upsert(fence.WithClaim(bg(), cl(10)), pool, []any{"soft"}, "", true), "tombstone")
	_, ok := fence.IsStale(rows.Upsert(fence.WithClaim(bg(), cl(3)), pool, []any{"soft"}, "stale three", false))
	assert.True(t, ok, "a tombstone keeps the mark")
}

func TestNewRowsRejectsBadConfig(t *testing.T) {
	good := pgguard.RowsConfig{Table: "docs", Key: []string{"id"}, Columns: []string{"body"}}
	for name, mod := range map[string]func(*pgguard.RowsConfig){
		"no table":        func(c *pgguard.RowsConfig) { c.Table = "" },
		"bad table":       func(c *pgguard.RowsConfig) { c.Table = `docs"; DROP TABLE x; --` },
		"no key":          func(c *pgguard.RowsConfig) { c.Key = nil },
		"bad key":         func(c *pgguard.RowsConfig) { c.Key = []string{"Id"} },
		"bad column":      func(c *pgguard.RowsConfig) { c.Columns = []string{"a b"} },
		"duplicate":       func(c *pgguard.RowsConfig) { c.Columns = []string{"id"} },
		"token is column": func(c *pgguard.RowsConfig) { c.TokenColumn = "body" },
		"bad run":         func(c *pgguard.RowsConfig) { c.RunColumn = "run;" },
		"bad schema":      func(c *pgguard.RowsConfig) { c.Schema = "pg_catalog" },
		"lock timeout":    func(c *pgguard.RowsConfig) { c.LockTimeout = 1 },
	} {
		cfg := good
		cfg.Key = append([]string(nil), good.Key...)
		cfg.Columns = append([]string(nil), good.Columns...)
		mod(&cfg)
		_, err := pgguard.NewRows(cfg)
		assert.ErrorIs(t, err, fence.ErrInvalidConfig, name)
	}
	_, err := pgguard.NewRows(good)
	require.NoError(t, err)
}

// Bad input is refused before any I/O.
func TestRowsBadInput(t *testing.T) {
	schema := setupRowsTable(t)
	rows := newRows(t, schema, nil)
	pool, c := tracedPool(t)
	conn, err := pool.Acquire(bg())
	require.NoError(t, err)
	defer conn.Release()
	c.start(conn.Conn())
	assert.ErrorIs(t, rows.Upsert(fence.WithClaim(bg(), cl(1)), conn, []any{"r", "extra"}, "v"), pgguard.ErrKeyArity)
	assert.ErrorIs(t, rows.Upsert(fence.WithClaim(bg(), cl(1)), conn, []any{"r"}), pgguard.ErrKeyArity)
	assert.ErrorIs(t, rows.Upsert(fence.WithClaim(bg(), cl(0)), conn, []any{"r"}, "v"), fence.ErrInvalidToken)
	assert.ErrorIs(t, rows.Upsert(fence.WithClaim(bg(), fence.Claim{Token: 1, Run: "a b"}), conn, []any{"r"}, "v"), fence.ErrInvalidRun)
	assert.ErrorIs(t, rows.Upsert(fence.WithClaim(bg(), cl(1)), conn, []any{strings.Repeat("x", 513)}, "v"), fence.ErrInvalidResource)
	assert.ErrorIs(t, rows.Upsert(bg(), conn, []any{"r"}, "v"), fence.ErrNoToken)
	assert.ErrorIs(t, rows.Upsert(fence.WithClaim(bg(), cl(1)), nil, []any{"r"}, "v"), fence.ErrNilArgument)
	assert.Empty(t, c.stop(), "bad input must not reach the database")
}

// A write outside a transaction waits for the row's lock at most
// RowsConfig.LockTimeout (set inside the statement): 55P03 → ErrBusy.
func TestRowsLockTimeoutIsBusy(t *testing.T) {
	schema := setupRowsTable(t)
	holder := fencetest.Pool(t)
	rows := newRows(t, schema, func(c *pgguard.RowsConfig) { c.LockTimeout = 50 * time.Millisecond })
	require.NoError(t, rows.Upsert(fence.WithClaim(bg(), cl(2)), holder, []any{"r"}, "two"))
	tx, err := holder.Begin(bg())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(bg()) }()
	require.NoError(t, rows.Upsert(fence.WithClaim(bg(), cl(3)), tx, []any{"r"}, "three"))
	requireCode(t, rows.Upsert(fence.WithClaim(bg(), cl(4)), fencetest.Pool(t), []any{"r"}, "four"), "55P03")
}

var _ pgguard.Querier = (*pgxpool.Pool)(nil)
