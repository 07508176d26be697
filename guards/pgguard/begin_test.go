package pgguard_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/guards/pgguard"
)

// trips counts what reaches the wire of a one-connection pool: each batch
// and each single query is one round trip.
type trips struct {
	mu     sync.Mutex
	events []string
}

func (c *trips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, "query")
	return ctx
}

func (c *trips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *trips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, "batch")
	return ctx
}

func (c *trips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (c *trips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (c *trips) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.events
	c.events = nil
	return out
}

// tripPool is a one-connection pool whose round trips are counted; the
// connection is opened before counting starts.
func tripPool(t *testing.T) (*pgxpool.Pool, *trips) {
	c := &trips{}
	pool := fencetest.PoolWith(t, fencetest.DatabaseURL(), func(cfg *pgxpool.Config) {
		cfg.MaxConns = 1
		cfg.ConnConfig.Tracer = c
	})
	c.take()
	return pool, c
}

// Begin is one round trip on every path: fresh resource, higher,
// equal, and stale (then one more for the rollback); a refused token
// returns no transaction and releases the connection.
func TestBeginOneRoundTrip(t *testing.T) {
	schema := setupSchema(t)
	pool, c := tripPool(t)
	for _, lt := range []time.Duration{0, -1} { // with and without SET LOCAL lock_timeout
		g := newGuard(t, pgguard.Config{Schema: schema, DB: pool, LockTimeout: lt})
		resource := fmt.Sprintf("r%v", lt)
		for _, step := range []struct {
			tok   fence.Token
			stale bool
		}{{5, false}, {8, false}, {8, false}, {6, true}, {9, false}} {
			tx, err := g.Begin(fence.WithClaim(bg(), cl(step.tok)), resource)
			if step.stale {
				se, ok := fence.IsStale(err)
				require.True(t, ok, "%v", err)
				assert.Equal(t, fence.StaleError{Resource: resource, Presented: 6, Highest: 8}, *se)
				assert.Nil(t, tx)
				assert.Equal(t, []string{"batch", "query"}, c.take(), "stale: one batch, then the rollback")
				assert.Zero(t, pool.Stat().AcquiredConns(), "connection released after a refusal")
				continue
			}
			require.NoError(t, err, "token %d", step.tok)
			assert.Equal(t, []string{"batch"}, c.take(), "token %d: BEGIN and fence in one round trip", step.tok)
			_, err = tx.Exec(bg(), upsertSQL(schema), resource, fmt.Sprint(step.tok), int64(step.tok))
			require.NoError(t, err)
			require.NoError(t, tx.Commit(bg()))
			c.take()
			assert.Zero(t, pool.Stat().AcquiredConns(), "connection released after commit")
		}
		assertState(t, newGuard(t, pgguard.Config{Schema: schema, DB: fencetest.Pool(t)}), fencetest.Pool(t), schema, resource, 9, "9", true)
	}
}

// Guard.Fence on a pool sends BEGIN and the fence together: one batch, then
// write's statement and COMMIT.
func TestFenceBeginsAndFencesInOneRoundTrip(t *testing.T) {
	schema := setupSchema(t)
	pool, c := tripPool(t)
	g := newGuard(t, pgguard.Config{Schema: schema, DB: pool})
	require.NoError(t, g.Fence(bg(), "r", 3, writeRow(schema, "r", "three", 3)))
	assert.Equal(t, []string{"batch", "query", "query"}, c.take())
	assert.Zero(t, pool.Stat().AcquiredConns())
}

// A refused Begin leaves the mark and the data as they were, and the
// transaction's statements are rolled back.
func TestBeginWritesOnlyWhenAdmitted(t *testing.T) {
	schema := setupSchema(t)
	pool := fencetest.Pool(t)
	g := newGuard(t, pgguard.Config{Schema: schema, DB: pool})
	tx, err := g.Begin(fence.WithClaim(bg(), cl(7)), "r")
	require.NoError(t, err)
	_, err = tx.Exec(bg(), upsertSQL(schema), "r", "seven", 7)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(bg()))
	assertState(t, g, pool, schema, "r", 0, "", false) // rolled back: no mark row either

	tx, err = g.Begin(fence.WithClaim(bg(), cl(7)), "r")
	require.NoError(t, err)
	require.NoError(t, tx.Commit(bg()))
	tx, err = g.Begin(fence.WithClaim(bg(), cl(6)), "r")
	assert.Nil(t, tx)
	se, ok := fence.IsStale(err)
	require.True(t, ok, "%v", err)
	assert.Equal(t, fence.Token(7), se.Highest)
	assertState(t, g, pool, schema, "r", 7, "", false)
}

func TestBeginBadInput(t *testing.T) {
	schema := setupSchema(t)
	pool, c := tripPool(t)
	g := newGuard(t, pgguard.Config{Schema: schema, DB: pool})
	sqlOnly := newGuard(t, pgguard.Config{Schema: schema, SQLDB: sqlDB(t)})
	for _, tc := range []struct {
		g        *pgguard.Guard
		resource string
		tok      fence.Token
		want     error
	}{
		{g, "r", 0, fence.ErrInvalidToken},
		{g, "", 1, fence.ErrInvalidResource},
		{g, "a\x00b", 1, fence.ErrInvalidResource},
		{sqlOnly, "r", 1, fence.ErrInvalidConfig}, // Begin needs Config.DB
	} {
		tx, err := tc.g.Begin(fence.WithClaim(bg(), cl(tc.tok)), tc.resource)
		assert.ErrorIs(t, err, tc.want, "%q %d", tc.resource, tc.tok)
		assert.Nil(t, tx)
	}
	var ce *fence.ConfigError
	_, err := sqlOnly.Begin(fence.WithToken(bg(), 1), "r")
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "DB", ce.Field)
	assert.Empty(t, c.take(), "bad input must not reach the database")
}

// A lock wait beyond Config.LockTimeout (set in the same batch as BEGIN) is
// ErrBusy with 55P03; a ctx deadline during the wait is DeadlineExceeded,
// not ErrBusy. Either way the connection is released and nothing
// changes.
func TestBeginBusy(t *testing.T) {
	schema := setupSchema(t)
	holder, waiter := fencetest.Pool(t), fencetest.Pool(t)
	g := newGuard(t, pgguard.Config{Schema: schema, DB: waiter, LockTimeout: 50 * time.Millisecond})
	h, err := holder.Begin(bg())
	require.NoError(t, err)
	defer func() { _ = h.Rollback(bg()) }()
	require.NoError(t, g.FenceTx(fence.WithClaim(bg(), cl(3)), h, "r"))

	tx, err := g.Begin(fence.WithClaim(bg(), cl(4)), "r")
	assert.Nil(t, tx)
	requireCode(t, err, "55P03")
	assert.Zero(t, waiter.Stat().AcquiredConns())

	noTimeout := newGuard(t, pgguard.Config{Schema: schema, DB: waiter, LockTimeout: -1})
	// The deadline ends the lock wait: it is the condition under test, not
	// a synchronisation sleep.
	ctx, cancel := context.WithTimeout(bg(), 100*time.Millisecond)
	defer cancel()
	tx, err = noTimeout.Begin(fence.WithClaim(ctx, cl(4)), "r")
	assert.Nil(t, tx)
	assert.NotErrorIs(t, err, fence.ErrBusy, "the caller's deadline ended the wait: not retryable")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	// A connection whose query was cancelled is destroyed by the pool in
	// the background; wait (bounded) for it to leave the acquired set.
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for waiter.Stat().AcquiredConns() != 0 {
		require.True(t, time.Now().Before(deadline), "connection never released after the cancelled wait")
		<-tick.C
	}

	require.NoError(t, h.Rollback(bg()))
	m, err := newGuard(t, pgguard.Config{Schema: schema, DB: holder}).Mark(bg(), "r")
	require.NoError(t, err)
	assert.Equal(t, fence.Token(0), m.Token)
}
