package pgguard_test

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/internal/netproxy"
)

// replyHold is a TCP proxy in front of the test database that can hold
// back the database's replies, with a pgx pool and a database/sql handle
// of one connection each through it. They run in pgx's exec mode, which
// sends a statement with arguments in one round trip (the default mode
// first prepares it, in a round trip of its own whose reply the hold would
// catch instead).
type replyHold struct {
	mu   sync.Mutex // one run at a time: a run's cleanup must not end another's hold
	p    *netproxy.Proxy
	pool *pgxpool.Pool
	db   *sql.DB
}

func newReplyHold(t *testing.T) *replyHold {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(fencetest.DatabaseURL())
	require.NoError(t, err)
	p, err := netproxy.New(net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() }) // after the pool's and the handle's cleanup (LIFO)
	pool := fencetest.PoolWith(t, fencetest.DatabaseURL(), func(c *pgxpool.Config) {
		c.ConnConfig.Host, c.ConnConfig.Port = p.Host(), p.Port()
		c.ConnConfig.Fallbacks = nil
		c.ConnConfig.ConnectTimeout = 5 * time.Second
		c.MaxConns = 1
		c.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	})
	cc := pool.Config().ConnConfig.Copy()
	db := stdlib.OpenDB(*cc)
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = db.Close() })
	return &replyHold{p: p, pool: pool, db: db}
}

// run runs f, which calls hold at the point from which the database's
// replies are to be held: the first reply that then reaches the proxy
// (the answer to the request in flight, which the database has therefore
// processed) calls applied, and no reply reaches the client until f
// returns. Runs are serialised: with the pool's one connection released
// as f returns, a concurrent run could otherwise start its hold before
// this run's cleanup, which would then lift it.
func (h *replyHold) run(applied func(), f func(hold func()) error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	defer func() {
		h.p.OnHold(nil)
		h.p.Restore()
	}()
	return f(func() {
		var once sync.Once
		h.p.OnHold(func(netproxy.Direction) { once.Do(applied) })
		h.p.Pause(netproxy.Downstream)
	})
}

// heldRowWriter is a marks-mode write callback that upserts the row and
// then starts the hold: the guard's COMMIT is the next request.
func heldRowWriter(schema, r, v string, tok fence.Token, hold func()) func(ctx context.Context, tx pgx.Tx) error {
	return func(ctx context.Context, tx pgx.Tx) error {
		if err := rowWriter(schema, r, v, int64(tok), false)(ctx, tx); err != nil {
			return err
		}
		hold()
		return nil
	}
}

// A COMMIT whose connection breaks after the database committed, while the
// context is live, is an unknown outcome too (not a context error); the
// row and the mark did commit.
func TestCommitConnectionLostIsOutcomeUnknown(t *testing.T) {
	schema := setupSchema(t)
	h := newReplyHold(t)
	g := newGuard(t, pgguard.Config{Schema: schema, DB: h.pool})
	ctx := testCtx(t)
	err := h.run(func() { h.p.CloseConns() }, func(hold func()) error {
		return g.InTx(fence.WithClaim(ctx, fence.Claim{Token: 4}), "doc/1", heldRowWriter(schema, "doc/1", "v", 4, hold))
	})
	require.ErrorIs(t, err, fence.ErrOutcomeUnknown)
	require.NotErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, fence.ErrBusy)
	oe, ok := fence.IsOutcomeUnknown(err)
	require.True(t, ok)
	require.Equal(t, "pgguard: commit", oe.Op)
	require.Equal(t, "doc/1", oe.Resource)
	v, tok, found, err := readRow(ctx, fencetest.Pool(t), schema, "doc/1")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "v", v)
	require.Equal(t, fence.Token(4), tok)
	mark, err := newGuard(t, pgguard.Config{Schema: schema, DB: fencetest.Pool(t)}).Mark(ctx, "doc/1")
	require.NoError(t, err)
	require.Equal(t, fence.Token(4), mark.Token)
}

// A context that ends before COMMIT is sent (here, inside the write
// callback) is "nothing written", never an unknown outcome: pgx and
// database/sql alike.
func TestContextEndedBeforeCommitIsNothingWritten(t *testing.T) {
	schema := setupSchema(t)
	g := newGuard(t, pgguard.Config{Schema: schema, DB: fencetest.Pool(t), SQLDB: sqlDB(t)})
	cause := errors.New("test: lease lost")
	check := func(t *testing.T, err error, r string) {
		t.Helper()
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorIs(t, err, cause)
		require.NotErrorIs(t, err, fence.ErrOutcomeUnknown)
		_, _, found, rerr := readRow(bg(), fencetest.Pool(t), schema, r)
		require.NoError(t, rerr)
		require.False(t, found, "nothing was written")
	}
	t.Run("pgx", func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(testCtx(t))
		err := g.InTx(fence.WithClaim(ctx, fence.Claim{Token: 1}), "doc/pgx", func(ctx context.Context, tx pgx.Tx) error {
			if err := rowWriter(schema, "doc/pgx", "v", 1, false)(ctx, tx); err != nil {
				return err
			}
			cancel(cause)
			return nil
		})
		check(t, err, "doc/pgx")
	})
	t.Run("database/sql", func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(testCtx(t))
		err := g.InSQLTx(fence.WithClaim(ctx, fence.Claim{Token: 1}), "doc/sql", func(ctx context.Context, tx *sql.Tx) error {
			if err := sqlUpsert(ctx, tx, schema, "doc/sql", "v", 1, false); err != nil {
				return err
			}
			cancel(cause)
			return nil
		})
		check(t, err, "doc/sql")
	})
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(bg(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
