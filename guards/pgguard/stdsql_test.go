package pgguard_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/guards/pgguard"
)

// A refused FenceSQLTx rolls back the caller's *sql.Tx, including the row
// written before the check: the caller cannot commit it.
func TestFenceSQLTxStaleRollsBack(t *testing.T) {
	schema := setupSchema(t)
	db := sqlDB(t)
	g := newGuard(t, pgguard.Config{Schema: schema, SQLDB: db})
	nop := func(context.Context, *sql.Tx) error { return nil }
	require.NoError(t, g.InSQLTx(fence.WithClaim(bg(), cl(7)), "r", nop))

	tx, err := db.BeginTx(bg(), nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(bg(), upsertSQL(schema), "r", "stale write", 5)
	require.NoError(t, err)
	se, ok := fence.IsStale(g.FenceSQLTx(fence.WithClaim(bg(), cl(5)), tx, "r"))
	require.True(t, ok)
	assert.Equal(t, fence.StaleError{Resource: "r", Presented: 5, Highest: 7}, *se)
	assert.ErrorIs(t, tx.Commit(), sql.ErrTxDone, "a refused tx must not be committable")
	_, _, found, err := readRow(bg(), fencetest.Pool(t), schema, "r")
	require.NoError(t, err)
	assert.False(t, found)
}

// On database/sql, lock timeout (55P03, InSQLTx's bound), serialization
// failure (40001) and deadlock (40P01) all match fence.ErrBusy.
func TestSQLBusy(t *testing.T) {
	schema := setupSchema(t)
	holderDB, waiterDB := sqlDB(t), sqlDB(t)
	g := newGuard(t, pgguard.Config{Schema: schema, SQLDB: waiterDB, LockTimeout: 50 * time.Millisecond})
	gHolder := newGuard(t, pgguard.Config{Schema: schema, SQLDB: holderDB, LockTimeout: 50 * time.Millisecond})
	nop := func(context.Context, *sql.Tx) error { return nil }

	t.Run("55P03", func(t *testing.T) {
		h, err := holderDB.BeginTx(bg(), nil)
		require.NoError(t, err)
		defer func() { _ = h.Rollback() }()
		require.NoError(t, g.FenceSQLTx(fence.WithClaim(bg(), cl(3)), h, "lock"))
		called := false
		err = g.InSQLTx(fence.WithClaim(bg(), cl(4)), "lock", func(context.Context, *sql.Tx) error { called = true; return nil })
		requireCode(t, err, "55P03")
		assert.False(t, called)
	})
	t.Run("40001", func(t *testing.T) {
		require.NoError(t, gHolder.InSQLTx(fence.WithClaim(bg(), cl(1)), "ser", nop))
		tx, err := waiterDB.BeginTx(bg(), &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
		require.NoError(t, err)
		defer func() { _ = tx.Rollback() }()
		_, err = tx.ExecContext(bg(), "SELECT 1") // takes the snapshot
		require.NoError(t, err)
		require.NoError(t, gHolder.InSQLTx(fence.WithClaim(bg(), cl(9)), "ser", nop))
		requireCode(t, g.FenceSQLTx(fence.WithClaim(bg(), cl(10)), tx, "ser"), "40001")
		assert.ErrorIs(t, tx.Commit(), sql.ErrTxDone)
	})
	t.Run("40P01", func(t *testing.T) {
		txA, err := holderDB.BeginTx(bg(), nil)
		require.NoError(t, err)
		defer func() { _ = txA.Rollback() }()
		txB, err := waiterDB.BeginTx(bg(), nil)
		require.NoError(t, err)
		defer func() { _ = txB.Rollback() }()
		var pidA int32
		require.NoError(t, txA.QueryRowContext(bg(), "SELECT pg_backend_pid()").Scan(&pidA))
		require.NoError(t, g.FenceSQLTx(fence.WithClaim(bg(), cl(1)), txA, "one"))
		require.NoError(t, g.FenceSQLTx(fence.WithClaim(bg(), cl(1)), txB, "two"))
		resA := make(chan error, 1)
		go func() { resA <- g.FenceSQLTx(fence.WithClaim(bg(), cl(2)), txA, "two") }()
		waitForLockWait(t, fencetest.Pool(t), uint32(pidA))
		errB := g.FenceSQLTx(fence.WithClaim(bg(), cl(2)), txB, "one")
		errA := <-resA
		if errA == nil {
			requireCode(t, errB, "40P01")
		} else {
			requireCode(t, errA, "40P01")
			assert.NoError(t, errB)
		}
	})
	t.Run("ended ctx is not busy", func(t *testing.T) {
		h, err := holderDB.BeginTx(bg(), nil)
		require.NoError(t, err)
		defer func() { _ = h.Rollback() }()
		require.NoError(t, g.FenceSQLTx(fence.WithClaim(bg(), cl(3)), h, "ctx"))
		errLost := errors.New("lease lost (test cause)")
		ctx, cancel := context.WithCancelCause(bg())
		cancel(errLost)
		err = g.InSQLTx(fence.WithToken(ctx, 4), "ctx", nop)
		assert.ErrorIs(t, err, context.Canceled)
		assert.ErrorIs(t, err, errLost)
		assert.NotErrorIs(t, err, fence.ErrBusy)
	})
}
