package hostile

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

func newManager(t *testing.T, pool *pgxpool.Pool, schema string) *lease.Manager {
	t.Helper()
	m, err := lease.New(lease.Config{Pool: pool, Schema: schema, TTL: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// leaseState is everything a bad call could have changed: the lease rows
// and the token sequence.
func leaseState(t *testing.T, pool *pgxpool.Pool, schema string) string {
	t.Helper()
	var rows string
	var last int64
	var called bool
	ctx := testCtx(t)
	require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(string_agg(account_id || '/' || session_id || '=' || fence_token || ':' || run_id, ',' ORDER BY account_id, session_id), '')
		FROM "`+schema+`".fencekit_leases`).Scan(&rows))
	require.NoError(t, pool.QueryRow(ctx, `SELECT last_value, is_called FROM "`+schema+`".fencekit_token_seq`).Scan(&last, &called))
	return rows + "|" + time.Duration(last).String() + "|" + map[bool]string{true: "called", false: "fresh"}[called]
}

// TestLeaseBadInput: every bad key, run id and configuration is refused
// with lease's typed errors; no row is written, no token is drawn, nothing
// panics (goroutine leaks are checked by TestMain).
func TestLeaseBadInput(t *testing.T) {
	schema := fencetest.Schema(t, migrations.Lease)
	pool := fencetest.Pool(t)
	m := newManager(t, pool, schema)
	ctx := testCtx(t)
	good := lease.Key{AccountID: "acct", SessionID: "s"}
	l, err := m.Acquire(ctx, good)
	require.NoError(t, err)
	before := leaseState(t, pool, schema)

	var badKeys []lease.Key
	for _, id := range []string{"", strings.Repeat("a", lease.MaxIDLen+1), "a\x00b", "a\nb", "\x7f", "\xff\xfe", string([]byte{'a', 0xc3})} {
		badKeys = append(badKeys, lease.Key{AccountID: id, SessionID: "s"}, lease.Key{AccountID: "acct", SessionID: id})
	}
	for _, k := range badKeys {
		notPanics(t, "bad key", func() {
			_, err := m.Acquire(ctx, k)
			assert.ErrorIs(t, err, lease.ErrInvalidKey, "Acquire(%q)", k)
			wctx, cancel := context.WithTimeout(ctx, time.Second)
			_, err = m.AcquireWait(wctx, k)
			cancel()
			assert.ErrorIs(t, err, lease.ErrInvalidKey, "AcquireWait(%q)", k)
			_, err = m.Inspect(ctx, k)
			assert.ErrorIs(t, err, lease.ErrInvalidKey, "Inspect(%q)", k)
			_, err = m.Renew(ctx, k, l.RunID())
			assert.ErrorIs(t, err, lease.ErrInvalidKey, "Renew(%q)", k)
			_, err = m.Release(ctx, k, l.RunID())
			assert.ErrorIs(t, err, lease.ErrInvalidKey, "Release(%q)", k)
			err = m.Run(ctx, k, func(context.Context, *lease.Lease) error {
				t.Errorf("Run called fn for bad key %q", k)
				return nil
			})
			assert.ErrorIs(t, err, lease.ErrInvalidKey, "Run(%q)", k)
		})
	}
	notPanics(t, "zero run id", func() {
		_, err := m.Renew(ctx, good, uuid.Nil)
		assert.ErrorIs(t, err, lease.ErrInvalidRunID)
		_, err = m.Release(ctx, good, uuid.Nil)
		assert.ErrorIs(t, err, lease.ErrInvalidRunID)
	})
	notPanics(t, "nil fn", func() {
		assert.Error(t, m.Run(ctx, lease.Key{AccountID: "acct", SessionID: "other"}, nil))
	})
	assert.Equal(t, before, leaseState(t, pool, schema), "bad input changed the lease table or drew a token")
	assert.NoError(t, l.Context().Err(), "bad input disturbed the held lease")

	for _, cfg := range []lease.Config{
		{},
		{Pool: pool, Schema: schema, TTL: -time.Second},
		{Pool: pool, Schema: schema, TTL: time.Nanosecond},
		{Pool: pool, Schema: schema, TTL: lease.MaxTTL + time.Second},
		{Pool: pool, Schema: schema, TTL: time.Second, SafetyMargin: time.Second},
		{Pool: pool, Schema: schema, TTL: time.Second, SafetyMargin: -1},
		{Pool: pool, Schema: schema, TTL: time.Second, RenewEvery: time.Second},
		{Pool: pool, Schema: schema, CallTimeout: -1},
		{Pool: pool, Schema: schema, TTL: time.Second, CallTimeout: time.Second},
		{Pool: pool, Schema: schema, WaitPoll: -1},
		{Pool: pool, Schema: "Bad Schema"},
	} {
		notPanics(t, "bad config", func() {
			m, err := lease.New(cfg)
			assert.ErrorIs(t, err, fence.ErrInvalidConfig, "%+v", cfg)
			assert.Nil(t, m)
		})
	}
	assert.Equal(t, before, leaseState(t, pool, schema))
}

// TestLeaseInjection: injection strings as lease.Config.Schema are refused
// (fence.ErrInvalidConfig wrapping sql.ErrInvalidIdentifier); as key ids they are
// bound values, stored verbatim.
func TestLeaseInjection(t *testing.T) {
	pool := fencetest.Pool(t)
	check := canary(t, pool)
	for _, inj := range injections {
		_, err := lease.New(lease.Config{Pool: pool, Schema: inj})
		assert.ErrorIs(t, err, fence.ErrInvalidConfig, "lease.New(%q)", inj)
		assert.ErrorIs(t, err, migrations.ErrInvalidIdentifier, "lease.New(%q)", inj)
	}
	schema := fencetest.Schema(t, migrations.Lease)
	m := newManager(t, pool, schema)
	ctx := testCtx(t)
	for _, inj := range injections {
		if strings.ContainsAny(inj, "\x00\n") {
			continue
		}
		k := lease.Key{AccountID: inj, SessionID: inj}
		l, err := m.Acquire(ctx, k)
		require.NoError(t, err, "%q", inj)
		st, err := m.Inspect(ctx, k)
		require.NoError(t, err)
		assert.Equal(t, l.RunID(), st.RunID, "%q", inj)
		_, err = l.Release(ctx)
		require.NoError(t, err)
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM "`+schema+`".fencekit_leases WHERE account_id = $1 AND session_id = $1`, inj).Scan(&n))
		assert.Equal(t, 1, n, "%q stored verbatim", inj)
	}
	check()
}

// TestLeastPrivilegeLease runs every lease operation as the least-privilege
// role: acquire, refusal, inspect, renew, release, waiting acquisition woken
// by a release (LISTEN/NOTIFY), Run; then a guarded write with the lease's
// token through pgguard, all as that role.
func TestLeastPrivilegeLease(t *testing.T) {
	schema, _, app := leastPrivilege(t)
	ctx := testCtx(t)
	m := newManager(t, app, schema)
	other := newManager(t, app, schema)
	k := lease.Key{AccountID: "acct", SessionID: "least-privilege"}

	l, err := m.Acquire(ctx, k)
	require.NoError(t, err)
	_, err = other.Acquire(ctx, k)
	assert.ErrorIs(t, err, lease.ErrHeld)
	st, err := other.Inspect(ctx, k)
	require.NoError(t, err)
	assert.True(t, st.Held())
	assert.Equal(t, l.Token(), st.Token)
	_, err = l.Renew(ctx)
	require.NoError(t, err)
	_, err = m.Renew(ctx, k, l.RunID())
	require.NoError(t, err)

	g, err := pgguard.New(pgguard.Config{DB: app, Schema: schema})
	require.NoError(t, err)
	require.NoError(t, g.Fence(l.Context(), "doc/lp", l.Token(), func(ctx context.Context) error {
		tx, _ := pgguard.TxFromContext(ctx)
		_, err := tx.Exec(ctx, `INSERT INTO "`+schema+`".app_data (id, v) VALUES ('doc/lp', 'first')`)
		return err
	}))

	// A waiter, woken by the release.
	type got struct {
		l   *lease.Lease
		err error
	}
	woke := make(chan got, 1)
	go func() {
		wl, err := other.AcquireWait(ctx, k)
		woke <- got{wl, err}
	}()
	res, err := l.Release(ctx)
	require.NoError(t, err)
	assert.Equal(t, lease.ReleaseDone, res)
	w := <-woke
	require.NoError(t, w.err)
	assert.Greater(t, w.l.Token(), l.Token())
	// The old token is now stale at the guard.
	err = g.Fence(ctx, "doc/lp", w.l.Token(), func(context.Context) error { return nil })
	require.NoError(t, err)
	err = g.Fence(ctx, "doc/lp", l.Token(), func(context.Context) error { return nil })
	_, stale := fence.IsStale(err)
	assert.True(t, stale, "%v", err)
	_, err = w.l.Release(ctx)
	require.NoError(t, err)

	ran := false
	require.NoError(t, m.Run(ctx, k, func(ctx context.Context, l *lease.Lease) error {
		ran = true
		_, err := l.Renew(ctx)
		return err
	}))
	assert.True(t, ran)
}
