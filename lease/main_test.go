package lease_test

import (
	"context"
	"errors"
	"fmt"
	"os"
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
	if os.Getenv(helperEnv) == "1" {
		os.Exit(helperMain())
	}
	fencetest.SkipExamplesInShort() // they need PostgreSQL
	goleak.VerifyTestMain(m)
}

func bg() context.Context { return context.Background() }

// env is one private schema and a raw pool for reading and tampering with
// rows behind the Managers' backs.
type env struct {
	t      *testing.T
	schema string
	raw    *pgxpool.Pool
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return &env{t: t, schema: fencetest.Schema(t, migrations.Lease), raw: fencetest.Pool(t)}
}

// manager builds a Manager on its own pool; cfg.Pool, when nil, is a new
// independent pool. The Manager is closed at cleanup (before the pool).
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

type row struct {
	RunID     uuid.UUID
	Token     int64
	ExpiresAt time.Time
	RenewedAt time.Time
	Released  bool
}

// row reads the key's row; ok is false when there is none.
func (e *env) row(k lease.Key) (row, bool) {
	e.t.Helper()
	var r row
	err := e.raw.QueryRow(bg(), fmt.Sprintf(
		`SELECT run_id, fence_token, expires_at, renewed_at, released_at IS NOT NULL FROM %q.fencekit_leases WHERE account_id=$1 AND session_id=$2`, e.schema),
		k.AccountID, k.SessionID).Scan(&r.RunID, &r.Token, &r.ExpiresAt, &r.RenewedAt, &r.Released)
	if err != nil && err.Error() == "no rows in result set" {
		return r, false
	}
	require.NoError(e.t, err)
	return r, true
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

// expire moves the key's expiry into the past, as if its holder had
// stopped renewing long ago.
func (e *env) expire(k lease.Key) {
	e.t.Helper()
	tag, err := e.raw.Exec(bg(), fmt.Sprintf(
		`UPDATE %q.fencekit_leases SET expires_at = clock_timestamp() - interval '1 hour' WHERE account_id=$1 AND session_id=$2`, e.schema),
		k.AccountID, k.SessionID)
	require.NoError(e.t, err)
	require.EqualValues(e.t, 1, tag.RowsAffected())
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

// errOf drops a call's first result, for asserting on its error.
func errOf[T any](_ T, err error) error { return err }

func uniqueKey(t *testing.T) lease.Key {
	return lease.Key{AccountID: "acct-" + t.Name(), SessionID: uuid.NewString()}
}

func isHeld(err error) (*lease.HeldError, bool) {
	var he *lease.HeldError
	return he, errors.As(err, &he)
}
