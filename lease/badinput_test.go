package lease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

var badKeys = map[string]lease.Key{
	"empty account":        {AccountID: "", SessionID: "s"},
	"empty session":        {AccountID: "a", SessionID: ""},
	"overlong account":     {AccountID: strings.Repeat("a", lease.MaxIDLen+1), SessionID: "s"},
	"overlong session":     {AccountID: "a", SessionID: strings.Repeat("é", lease.MaxIDLen/2+1)},
	"NUL in account":       {AccountID: "a\x00b", SessionID: "s"},
	"NUL in session":       {AccountID: "a", SessionID: "\x00"},
	"invalid UTF-8":        {AccountID: "a\xff", SessionID: "s"},
	"newline":              {AccountID: "a", SessionID: "s\n"},
	"DEL":                  {AccountID: "a\x7f", SessionID: "s"},
	"C1 control character": {AccountID: "a", SessionID: "s\u0085"},
}

// TestKeyValidate needs no database.
func TestKeyValidate(t *testing.T) {
	for name, k := range badKeys {
		err := k.Validate()
		require.ErrorIs(t, err, lease.ErrInvalidKey, name)
		var ke *lease.KeyError
		require.True(t, errors.As(err, &ke), name)
		require.NotEmpty(t, ke.Field)
	}
	for _, k := range []lease.Key{
		{AccountID: "a", SessionID: "s"},
		{AccountID: strings.Repeat("a", lease.MaxIDLen), SessionID: strings.Repeat("s", lease.MaxIDLen)},
		{AccountID: "ünïcødé 账户", SessionID: "sess/with spaces/and:colons"},
	} {
		require.NoError(t, k.Validate(), k.String())
	}
}

// TestBadInputTouchesNothing: every operation refuses bad keys and zero
// run_ids with typed errors, writing no row and drawing no token.
func TestBadInputTouchesNothing(t *testing.T) {
	e := newEnv(t)
	m := e.manager(lease.Config{})
	seq0, called0 := e.seq()
	ops := map[string]func(lease.Key) error{
		"Acquire":     func(k lease.Key) error { _, err := m.Acquire(bg(), k); return err },
		"AcquireWait": func(k lease.Key) error { _, err := m.AcquireWait(bg(), k); return err },
		"Inspect":     func(k lease.Key) error { _, err := m.Inspect(bg(), k); return err },
		"Renew":       func(k lease.Key) error { _, err := m.Renew(bg(), k, uuid.New()); return err },
		"Release":     func(k lease.Key) error { _, err := m.Release(bg(), k, uuid.New()); return err },
		"Run": func(k lease.Key) error {
			return m.Run(bg(), k, func(context.Context, *lease.Lease) error { t.Error("fn ran"); return nil })
		},
	}
	for name, k := range badKeys {
		for op, f := range ops {
			err := f(k)
			require.ErrorIs(t, err, lease.ErrInvalidKey, "%s with %s", op, name)
		}
	}
	good := uniqueKey(t)
	_, err := m.Renew(bg(), good, uuid.Nil)
	require.ErrorIs(t, err, lease.ErrInvalidRunID)
	_, err = m.Release(bg(), good, uuid.Nil)
	require.ErrorIs(t, err, lease.ErrInvalidRunID)
	_, err = m.Revoke(bg(), good, uuid.Nil)
	require.ErrorIs(t, err, lease.ErrInvalidRunID)
	_, err = m.Resume(bg(), good, uuid.Nil)
	require.ErrorIs(t, err, lease.ErrInvalidRunID)

	require.Equal(t, 0, e.rowCount())
	seq1, called1 := e.seq()
	require.Equal(t, seq0, seq1)
	require.Equal(t, called0, called1)
}

// TestConfigValidation: New rejects every bad Config field with a
// *fence.ConfigError naming it (matching fence.ErrInvalidConfig), and fills defaults.
func TestConfigValidation(t *testing.T) {
	pool := fencetest.Pool(t)
	cases := map[string]struct {
		cfg   lease.Config
		field string
	}{
		"nil pool":              {lease.Config{}, "Pool"},
		"bad schema":            {lease.Config{Pool: pool, Schema: "Robert'); DROP TABLE"}, "Schema"},
		"pg_ schema":            {lease.Config{Pool: pool, Schema: "pg_catalog"}, "Schema"},
		"negative TTL":          {lease.Config{Pool: pool, TTL: -time.Second}, "TTL"},
		"tiny TTL":              {lease.Config{Pool: pool, TTL: 50 * time.Millisecond}, "TTL"},
		"absurd TTL":            {lease.Config{Pool: pool, TTL: 25 * time.Hour}, "TTL"},
		"negative margin":       {lease.Config{Pool: pool, SafetyMargin: -time.Second}, "SafetyMargin"},
		"margin ≥ TTL":          {lease.Config{Pool: pool, TTL: time.Second, SafetyMargin: time.Second}, "SafetyMargin"},
		"negative renew":        {lease.Config{Pool: pool, RenewEvery: -time.Second}, "RenewEvery"},
		"renew ≥ trust window":  {lease.Config{Pool: pool, TTL: time.Second, SafetyMargin: 200 * time.Millisecond, RenewEvery: 800 * time.Millisecond}, "RenewEvery"},
		"negative call timeout": {lease.Config{Pool: pool, CallTimeout: -time.Second}, "CallTimeout"},
		"negative wait poll":    {lease.Config{Pool: pool, WaitPoll: -time.Second}, "WaitPoll"},
	}
	for name, c := range cases {
		m, err := lease.New(c.cfg)
		require.Nil(t, m, name)
		require.ErrorIs(t, err, fence.ErrInvalidConfig, name)
		var ce *fence.ConfigError
		require.True(t, errors.As(err, &ce), name)
		require.Equal(t, c.field, ce.Field, name)
	}
	_, err := lease.New(lease.Config{Pool: pool, Schema: "Bad"})
	require.ErrorIs(t, err, migrations.ErrInvalidIdentifier)

	m, err := lease.New(lease.Config{Pool: pool})
	require.NoError(t, err)
	require.Equal(t, lease.DefaultTTL, m.TTL())
	require.Equal(t, lease.DefaultTTL-lease.DefaultTTL/5, m.TrustWindow())
	require.NoError(t, m.Close())
	// A large safety margin shortens the default renewal period to fit.
	m, err = lease.New(lease.Config{Pool: pool, TTL: time.Second, SafetyMargin: 900 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, m.Close())
}

// TestKeyResource: Key.Resource scopes a name to a key unambiguously: ids
// or names holding '/' cannot make two different (key, name) triples
// collide, and the result is a valid resource name for the guards.
func TestKeyResource(t *testing.T) {
	cases := []struct {
		k    lease.Key
		name string
	}{
		{lease.Key{AccountID: "a/b", SessionID: "c"}, "reports"},
		{lease.Key{AccountID: "a", SessionID: "b/c"}, "reports"},
		{lease.Key{AccountID: "a", SessionID: "b"}, "c/reports"},
		{lease.Key{AccountID: "a", SessionID: "b/c/reports"}, ""},
		{lease.Key{AccountID: "a", SessionID: "b"}, "reports"},
		{lease.Key{AccountID: "a", SessionID: "b"}, "reports/"},
		{lease.Key{AccountID: "a%2Fb", SessionID: "c"}, "reports"},
		{lease.Key{AccountID: "..", SessionID: "."}, "reports"},
	}
	seen := map[string]int{}
	for i, c := range cases {
		r := c.k.Resource(c.name)
		require.NoError(t, fence.ValidateResource(r), "case %d: %q", i, r)
		if j, dup := seen[r]; dup {
			t.Fatalf("cases %d and %d collide: %q", j, i, r)
		}
		seen[r] = i
		require.Equal(t, r, c.k.Resource(c.name), "deterministic")
	}
	require.Equal(t, "acct-1/conversation-42/reports", lease.Key{AccountID: "acct-1", SessionID: "conversation-42"}.Resource("reports"))
}

// TestCallTimeoutInsideTrustWindow: Config documents CallTimeout below
// TTL − SafetyMargin − RenewEvery (one stalled statement delays the next
// renewal by as much). Left unset it is derived to fit (DefaultCallTimeout
// when that fits, as with the default TTL); set explicitly out of that
// range it is a *fence.ConfigError naming CallTimeout.
func TestCallTimeoutInsideTrustWindow(t *testing.T) {
	pool := fencetest.Pool(t)
	for _, c := range []lease.Config{
		{TTL: time.Second},
		{TTL: lease.MinTTL},
		{TTL: 2 * time.Second, SafetyMargin: time.Second, RenewEvery: 900 * time.Millisecond},
		{TTL: time.Minute},
		{},
	} {
		c.Pool = pool
		m, err := lease.New(c)
		require.NoError(t, err, "%+v", c)
		bound := m.TrustWindow() - lease.RenewEveryOf(m)
		got := lease.CallTimeoutOf(m)
		require.Positive(t, got)
		require.Less(t, got, bound, "TTL %v: derived CallTimeout %v, bound %v", c.TTL, got, bound)
		require.LessOrEqual(t, got, lease.DefaultCallTimeout)
		require.NoError(t, m.Close())
	}
	m, err := lease.New(lease.Config{Pool: pool})
	require.NoError(t, err)
	require.Equal(t, lease.DefaultCallTimeout, lease.CallTimeoutOf(m), "the default TTL keeps the default")
	require.NoError(t, m.Close())

	for _, c := range []lease.Config{
		{TTL: time.Second, CallTimeout: lease.DefaultCallTimeout},
		{TTL: time.Second, CallTimeout: time.Second},
		// TTL 1s: trust window 800ms, RenewEvery 1s/3: the bound is 466.67ms.
		{TTL: time.Second, CallTimeout: 800*time.Millisecond - time.Second/3},
		{CallTimeout: 7 * time.Second}, // the defaults' bound: 12s − 5s
	} {
		c.Pool = pool
		m, err := lease.New(c)
		require.Nil(t, m)
		var ce *fence.ConfigError
		require.True(t, errors.As(err, &ce), "%+v: %v", c, err)
		require.Equal(t, "CallTimeout", ce.Field)
		require.Contains(t, ce.Reason, "TTL − SafetyMargin − RenewEvery")
	}
	m, err = lease.New(lease.Config{Pool: pool, TTL: time.Second, CallTimeout: 400 * time.Millisecond})
	require.NoError(t, err, "inside the bound")
	require.Equal(t, 400*time.Millisecond, lease.CallTimeoutOf(m))
	require.NoError(t, m.Close())
}

// TestStalledRenewReturnsInsideTrustWindow: with TTL 1s and CallTimeout
// left to its default, a renewal whose statement gets no reply (a network
// partition) returns its timeout before the lease's trust deadline, while a
// retry could still keep the lease, not seconds after it.
func TestStalledRenewReturnsInsideTrustWindow(t *testing.T) {
	e := newEnv(t)
	pool, fault := fencetest.FaultyPool(t)
	m := e.manager(lease.Config{Pool: pool, TTL: time.Second})
	l, err := m.Acquire(bg(), uniqueKey(t))
	require.NoError(t, err)
	trust := l.TrustDeadline()
	fault.Partition()
	defer fault.Restore()
	_, err = l.Renew(bg())
	returned := time.Now()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.True(t, returned.Before(trust), "the stalled renewal returned %v after the trust deadline", returned.Sub(trust))
}
