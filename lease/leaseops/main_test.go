package leaseops_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

func TestMain(m *testing.M) {
	fencetest.SkipExamplesInShort() // they need PostgreSQL
	goleak.VerifyTestMain(m)
}

func bg() context.Context { return context.Background() }

// env is one private lease schema and a raw pool for reading and tampering
// with rows behind the Managers' backs.
type env struct {
	t      *testing.T
	schema string
	raw    *pgxpool.Pool
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return &env{t: t, schema: fencetest.Schema(t, migrations.Lease), raw: fencetest.Pool(t)}
}

// manager builds a Manager on its own pool (a new independent pool when
// cfg.Pool is nil), closed at cleanup.
func (e *env) manager(cfg lease.Config) *lease.Manager {
	e.t.Helper()
	if cfg.Pool == nil {
		cfg.Pool = fencetest.Pool(e.t)
	}
	cfg.Schema = e.schema
	m, err := lease.New(cfg)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = m.Close() })
	return m
}

func (e *env) exec(sql string, args ...any) int64 {
	e.t.Helper()
	tag, err := e.raw.Exec(bg(), fmt.Sprintf(sql, e.schema), args...)
	require.NoError(e.t, err)
	return tag.RowsAffected()
}

// hasRow reports whether the key has a row.
func (e *env) hasRow(k lease.Key) bool {
	e.t.Helper()
	var n int
	require.NoError(e.t, e.raw.QueryRow(bg(), fmt.Sprintf(
		`SELECT count(*) FROM %q.fencekit_leases WHERE account_id=$1 AND session_id=$2`, e.schema), k.AccountID, k.SessionID).Scan(&n))
	return n > 0
}

func (e *env) rowCount() int {
	e.t.Helper()
	var n int
	require.NoError(e.t, e.raw.QueryRow(bg(), fmt.Sprintf(`SELECT count(*) FROM %q.fencekit_leases`, e.schema)).Scan(&n))
	return n
}

// seq returns the sequence's last_value and is_called.
func (e *env) seq() (int64, bool) {
	e.t.Helper()
	var v int64
	var called bool
	require.NoError(e.t, e.raw.QueryRow(bg(), fmt.Sprintf(`SELECT last_value, is_called FROM %q.fencekit_token_seq`, e.schema)).Scan(&v, &called))
	return v, called
}

// checkedNode is the node the schema's floor is recorded as checked on.
func (e *env) checkedNode() string {
	e.t.Helper()
	var n *string
	require.NoError(e.t, e.raw.QueryRow(bg(), fmt.Sprintf(`SELECT checked_node FROM %q.fencekit_token_floor`, e.schema)).Scan(&n))
	if n == nil {
		return ""
	}
	return *n
}

// expire moves the key's expiry into the past.
func (e *env) expire(k lease.Key) {
	e.t.Helper()
	require.EqualValues(e.t, 1, e.exec(`UPDATE %q.fencekit_leases SET expires_at = clock_timestamp() - interval '1 hour' WHERE account_id=$1 AND session_id=$2`,
		k.AccountID, k.SessionID))
}

// age moves the key's row back in time by d: released rows keep
// expires_at = released_at.
func (e *env) age(k lease.Key, d time.Duration) {
	e.t.Helper()
	require.EqualValues(e.t, 1, e.exec(`UPDATE %q.fencekit_leases
		SET acquired_at = acquired_at - $3::bigint * interval '1 microsecond',
		    renewed_at  = renewed_at  - $3::bigint * interval '1 microsecond',
		    expires_at  = expires_at  - $3::bigint * interval '1 microsecond',
		    released_at = released_at - $3::bigint * interval '1 microsecond'
		WHERE account_id=$1 AND session_id=$2`, k.AccountID, k.SessionID, d.Microseconds()))
}

// waitFor polls cond (external state) until true or the deadline.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func uniqueKey(t *testing.T) lease.Key {
	return lease.Key{AccountID: "acct-" + t.Name(), SessionID: uuid.NewString()}
}
