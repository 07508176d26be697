package lease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// serializableDB creates a private database whose sessions default to
// SERIALIZABLE, migrated with the lease set, and dropped at cleanup (after
// the pools opened on it, which close first: cleanups run LIFO). It returns
// the database's name and a function opening independent pools on it.
func serializableDB(t *testing.T) (string, func() *pgxpool.Pool) {
	t.Helper()
	admin := fencetest.Pool(t)
	name := fencetest.RandomName("fk_ser_")
	_, err := admin.Exec(bg(), "CREATE DATABASE "+name) // RandomName: [a-z0-9_] only
	require.NoError(t, err)
	t.Cleanup(func() {
		if _, err := admin.Exec(bg(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	_, err = admin.Exec(bg(), "ALTER DATABASE "+name+" SET default_transaction_isolation = serializable")
	require.NoError(t, err)
	open := func() *pgxpool.Pool {
		return fencetest.PoolWith(t, fencetest.DatabaseURL(), func(c *pgxpool.Config) { c.ConnConfig.Database = name })
	}
	p := open()
	_, err = migrations.Migrate(bg(), p, migrations.Options{}, migrations.Lease)
	require.NoError(t, err)
	var iso string
	require.NoError(t, p.QueryRow(bg(), "SHOW default_transaction_isolation").Scan(&iso))
	require.Equal(t, "serializable", iso)
	return name, open
}

// behindRowLock runs call while another transaction holds the key's row
// lock, and commits that transaction (an update of the row) once call's
// statement waits on the lock. Under SERIALIZABLE, the waiting statement
// then fails with a serialization failure (SQLSTATE 40001).
func behindRowLock(t *testing.T, db string, raw *pgxpool.Pool, k lease.Key, call func() error) error {
	t.Helper()
	tx, err := raw.Begin(bg())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(bg()) }()
	tag, err := tx.Exec(bg(), `UPDATE public.fencekit_leases SET renewed_at = renewed_at WHERE account_id=$1 AND session_id=$2`,
		k.AccountID, k.SessionID)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	done := make(chan error, 1)
	go func() { done <- call() }()
	waitFor(t, 10*time.Second, "the statement to wait on the row lock", func() bool {
		var n int
		require.NoError(t, raw.QueryRow(bg(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = $1 AND wait_event_type = 'Lock' AND query LIKE '%fencekit_leases%'`, db).Scan(&n))
		return n > 0
	})
	require.NoError(t, tx.Commit(bg()))
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the statement did not return after the commit")
		return nil
	}
}

func requireBusy(t *testing.T, err error) {
	t.Helper()
	require.ErrorIs(t, err, lease.ErrBusy)
	var pe *pgconn.PgError
	require.True(t, errors.As(err, &pe), "the driver's error is kept: %v", err)
	require.Equal(t, "40001", pe.Code)
	require.NotErrorIs(t, err, lease.ErrHeld)
	require.NotErrorIs(t, err, lease.ErrLost)
}

// TestSerializableDatabaseBusyIsTyped: on a database whose sessions are
// SERIALIZABLE, a grant, a renewal and a release that lose a serialization
// race report ErrBusy (keeping SQLSTATE 40001) and change nothing: the key
// stays free, the lease stays held; AcquireWait retries and acquires.
func TestSerializableDatabaseBusyIsTyped(t *testing.T) {
	db, open := serializableDB(t)
	raw := open()
	newManager := func() *lease.Manager {
		m, err := lease.New(lease.Config{Pool: open(), TTL: time.Minute})
		require.NoError(t, err)
		t.Cleanup(func() { _ = m.Close() })
		return m
	}
	a, b := newManager(), newManager()
	k := uniqueKey(t)
	l, err := a.Acquire(bg(), k)
	require.NoError(t, err)
	_, err = l.Release(bg())
	require.NoError(t, err)

	err = behindRowLock(t, db, raw, k, func() error { _, err := b.Acquire(bg(), k); return err })
	requireBusy(t, err)
	own, err := b.Inspect(bg(), k)
	require.NoError(t, err)
	require.Equal(t, lease.StateReleased, own.State, "the aborted grant changed nothing")
	require.Equal(t, l.RunID(), own.RunID)

	err = behindRowLock(t, db, raw, k, func() error { _, err := b.Takeover(bg(), k); return err })
	requireBusy(t, err)

	var got *lease.Lease
	err = behindRowLock(t, db, raw, k, func() error {
		var err error
		got, err = b.AcquireWait(bg(), k)
		return err
	})
	require.NoError(t, err, "AcquireWait retries a serialization failure")
	require.Greater(t, got.Token(), l.Token())

	err = behindRowLock(t, db, raw, k, func() error { _, err := got.Renew(bg()); return err })
	requireBusy(t, err)
	require.NoError(t, got.Err(), "an aborted renewal does not end the lease")

	// Released through a (the run is b's): in heartbeat mode the Manager
	// holding a run keeps releasing it in the background after a failed
	// release (unreleased.go), which would release it before the Inspect
	// below could see what the aborted statement did.
	err = behindRowLock(t, db, raw, k, func() error { _, err := a.Release(bg(), k, got.RunID()); return err })
	requireBusy(t, err)
	own, err = a.Inspect(bg(), k)
	require.NoError(t, err)
	require.Equal(t, lease.StateHeld, own.State, "the aborted release changed nothing")
	require.Equal(t, got.RunID(), own.RunID)
}
