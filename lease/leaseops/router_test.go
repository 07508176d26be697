package leaseops_test

import (
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/leaseops"
	"github.com/fencekit/fencekit/sql/migrations"
)

// database creates a database with a random name on the test server,
// migrated with the lease set, and drops it at cleanup (after the pools
// opened on it, which are closed first: cleanups run LIFO).
func database(t *testing.T) *pgxpool.Pool {
	t.Helper()
	admin := fencetest.Pool(t)
	name := fencetest.RandomName("fk_part_")
	_, err := admin.Exec(bg(), "CREATE DATABASE "+name) // RandomName: [a-z0-9_] only
	require.NoError(t, err)
	t.Cleanup(func() {
		if _, err := admin.Exec(bg(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	pool := fencetest.PoolWith(t, fencetest.DatabaseURL(), func(c *pgxpool.Config) { c.ConnConfig.Database = name })
	_, err = migrations.Migrate(bg(), pool, migrations.Options{}, migrations.Lease)
	require.NoError(t, err)
	return pool
}

// TestRouterTwoDatabases: keys are routed by account to one of two real
// databases; every row lives only in its partition, all keys of an account
// share it, tokens increase per key within the partition, and Inspect and
// Release reach the right database.
func TestRouterTwoDatabases(t *testing.T) {
	pools := []*pgxpool.Pool{database(t), database(t)}
	var parts []*lease.Manager
	for _, p := range pools {
		m, err := lease.New(lease.Config{Pool: p})
		require.NoError(t, err)
		t.Cleanup(func() { _ = m.Close() })
		parts = append(parts, m)
	}
	r, err := leaseops.NewRouter(leaseops.RouterConfig{Partitions: parts})
	require.NoError(t, err)

	count := func(p *pgxpool.Pool, k lease.Key) int {
		var n int
		require.NoError(t, p.QueryRow(bg(), `SELECT count(*) FROM public.fencekit_leases WHERE account_id=$1 AND session_id=$2`,
			k.AccountID, k.SessionID).Scan(&n))
		return n
	}
	used := map[int]bool{}
	for a := range 16 {
		acct := fmt.Sprintf("acct-%d-%s", a, uuid.NewString())
		var home *lease.Manager
		for s := range 2 {
			k := lease.Key{AccountID: acct, SessionID: fmt.Sprint(s)}
			m, err := r.For(k)
			require.NoError(t, err)
			if home == nil {
				home = m
			}
			require.Same(t, home, m, "all keys of an account share a partition")
			l1, err := r.Acquire(bg(), k)
			require.NoError(t, err)
			st, err := r.Inspect(bg(), k)
			require.NoError(t, err)
			require.Equal(t, l1.RunID(), st.RunID)
			res, err := r.Release(bg(), k, l1.RunID())
			require.NoError(t, err)
			require.Equal(t, lease.ReleaseDone, res)
			l2, err := r.Acquire(bg(), k)
			require.NoError(t, err)
			require.Greater(t, l2.Token(), l1.Token(), "per-key order within the partition")
			for i, p := range pools {
				want := 0
				if parts[i] == m {
					want, used[i] = 1, true
				}
				require.Equal(t, want, count(p, k), "row of %s in partition %d", k, i)
			}
		}
	}
	require.Len(t, used, 2, "16 accounts spread over both databases")
	require.Len(t, r.Leases(), 32)

	_, err = leaseops.NewRouter(leaseops.RouterConfig{})
	require.ErrorIs(t, err, lease.ErrInvalidConfig)
	_, err = leaseops.NewRouter(leaseops.RouterConfig{Partitions: []*lease.Manager{parts[0], nil}})
	require.ErrorIs(t, err, lease.ErrInvalidConfig)
	bad, err := leaseops.NewRouter(leaseops.RouterConfig{Partitions: parts, Partition: func(lease.Key) int { return 2 }})
	require.NoError(t, err)
	_, err = bad.Acquire(bg(), uniqueKey(t))
	require.Error(t, err)
	_, err = r.Acquire(bg(), lease.Key{})
	require.ErrorIs(t, err, lease.ErrInvalidKey)
}
