package leaseops_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
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

	// List pages across both partitions: every key exactly once, partition
	// by partition in RouterConfig order.
	index := func(k lease.Key) int {
		m, err := r.For(k)
		require.NoError(t, err)
		return slices.Index(parts, m)
	}
	seen := map[lease.Key]bool{}
	last, pages := -1, 0
	for after := (lease.Key{}); ; pages++ {
		page, err := r.List(bg(), lease.WithAfter(after), lease.WithLimit(5))
		require.NoError(t, err)
		for _, o := range page {
			require.False(t, seen[o.Key], "%s listed twice", o.Key)
			seen[o.Key] = true
			require.GreaterOrEqual(t, index(o.Key), last, "partition order")
			last = index(o.Key)
			require.Equal(t, lease.StateHeld, o.State)
		}
		if len(page) < 5 {
			break
		}
		after = page[len(page)-1].Key
	}
	require.Len(t, seen, 32)
	require.Equal(t, 6, pages, "32 keys in pages of 5: six full pages, then a short one")
	var acct string
	for k := range seen {
		acct = k.AccountID
		break
	}
	mine, err := r.List(bg(), lease.WithAccount(acct))
	require.NoError(t, err)
	require.Len(t, mine, 2, "Account reads its partition only")
	_, err = r.List(bg(), lease.WithAfter(lease.Key{AccountID: "a"}))
	require.ErrorIs(t, err, lease.ErrInvalidOption)
	_, err = r.List(bg(), lease.WithLimit(-1))
	require.ErrorIs(t, err, lease.ErrInvalidOption)

	// The rest of the Manager's surface, each on the key's partition.
	k := lease.Key{AccountID: acct, SessionID: "0"}
	home := parts[index(k)]
	w, err := r.Watch(bg(), k)
	require.NoError(t, err)
	defer w.Close()
	ev, err := w.Next(bg())
	require.NoError(t, err)
	require.Equal(t, lease.WatchCurrent, ev.Kind)
	held, err := home.Inspect(bg(), k)
	require.NoError(t, err)
	taken, err := r.Takeover(bg(), k, lease.WithHolder("phone"))
	require.NoError(t, err)
	require.Greater(t, taken.Token(), held.Token)
	require.Equal(t, "phone", taken.Holder())
	_, err = r.Renew(bg(), k, taken.RunID())
	require.NoError(t, err)
	rev, err := r.Revoke(bg(), k, taken.RunID())
	require.NoError(t, err)
	require.True(t, rev.Revoked)
	waited, err := r.AcquireWait(bg(), k)
	require.NoError(t, err, "a revoked key is free")
	require.Greater(t, waited.Token(), taken.Token())
	_, err = waited.Release(bg())
	require.NoError(t, err)
	ran := false
	require.NoError(t, r.Run(bg(), k, func(_ context.Context, l *lease.Lease) error {
		ran = l.Holder() == "job"
		return nil
	}, lease.WithHolder("job")))
	require.True(t, ran, "Run passes its options on")

	_, err = leaseops.NewRouter(leaseops.RouterConfig{})
	require.ErrorIs(t, err, fence.ErrInvalidConfig)
	_, err = leaseops.NewRouter(leaseops.RouterConfig{Partitions: []*lease.Manager{parts[0], nil}})
	require.ErrorIs(t, err, fence.ErrInvalidConfig)
	bad, err := leaseops.NewRouter(leaseops.RouterConfig{Partitions: parts, Partition: func(lease.Key) int { return 2 }})
	require.NoError(t, err)
	_, err = bad.Acquire(bg(), uniqueKey(t))
	require.Error(t, err)
	_, err = r.Acquire(bg(), lease.Key{})
	require.ErrorIs(t, err, lease.ErrInvalidKey)
}

// TestRouterHasManagerSurface: every exported method of lease.Manager that
// works on keys has a Router method of the same name and signature, so a
// method added to the Manager fails here until the Router delegates it.
func TestRouterHasManagerSurface(t *testing.T) {
	// Per-Manager methods: read each partition's yourself.
	perManager := map[string]bool{"Close": true, "Health": true, "TTL": true, "TrustWindow": true}
	mt, rt := reflect.TypeFor[*lease.Manager](), reflect.TypeFor[*leaseops.Router]()
	for i := range mt.NumMethod() {
		m := mt.Method(i)
		if perManager[m.Name] {
			continue
		}
		rm, ok := rt.MethodByName(m.Name)
		if !ok {
			t.Errorf("Router has no %s (lease.Manager.%s)", m.Name, m.Name)
			continue
		}
		// Compare without the receiver.
		want, got := m.Type, rm.Type
		if want.NumIn() != got.NumIn() || want.NumOut() != got.NumOut() || want.IsVariadic() != got.IsVariadic() {
			t.Errorf("Router.%s is %s, lease.Manager.%s is %s", m.Name, got, m.Name, want)
			continue
		}
		for j := 1; j < want.NumIn(); j++ {
			if want.In(j) != got.In(j) {
				t.Errorf("Router.%s argument %d is %s, want %s", m.Name, j, got.In(j), want.In(j))
			}
		}
		for j := range want.NumOut() {
			if want.Out(j) != got.Out(j) {
				t.Errorf("Router.%s result %d is %s, want %s", m.Name, j, got.Out(j), want.Out(j))
			}
		}
	}
}
