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

// suiteRenewal is the renewal mode of the Managers env.manager builds from
// a Config that leaves Renewal zero: the heartbeat (lease.New's default),
// or per-lease renewal when TEST_LEASE_RENEWAL=per-lease (make
// test/renewalmodes runs the core subset so). Tests that need one mode set
// Renewal themselves.
var suiteRenewal = func() lease.RenewalMode {
	if os.Getenv("TEST_LEASE_RENEWAL") == "per-lease" {
		return lease.RenewalPerLease
	}
	return lease.RenewalHeartbeat
}()

// manager builds a Manager on its own pool; cfg.Pool, when nil, is a new
// independent pool. The Manager is closed at cleanup (before the pool).
func (e *env) manager(cfg lease.Config) *lease.Manager {
	e.t.Helper()
	if cfg.Pool == nil {
		cfg.Pool = fencetest.Pool(e.t)
	}
	cfg.Schema = e.schema
	if cfg.Renewal == 0 {
		cfg.Renewal = suiteRenewal
	}
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

// row reads the key's row; ok is false when there is none. A heartbeat
// row (migration 0009) reports its heartbeat's expiry and last renewal, as
// Inspect does.
func (e *env) row(k lease.Key) (row, bool) {
	e.t.Helper()
	var r row
	err := e.raw.QueryRow(bg(), fmt.Sprintf(
		`SELECT l.run_id, l.fence_token,
		        CASE WHEN l.expires_at = 'infinity' THEN coalesce(hb.expires_at, l.acquired_at) ELSE l.expires_at END,
		        CASE WHEN l.expires_at = 'infinity' THEN greatest(l.renewed_at, hb.renewed_at) ELSE l.renewed_at END,
		        l.released_at IS NOT NULL
		   FROM %[1]q.fencekit_leases l
		   LEFT JOIN %[1]q.fencekit_managers hb ON hb.manager_id = l.manager_id AND l.expires_at = 'infinity'
		  WHERE l.account_id=$1 AND l.session_id=$2`, e.schema),
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
// stopped renewing long ago. A heartbeat row becomes a finite expired row
// and its run is recorded as revoked (as Manager.Revoke does), so that its
// holder learns at its next heartbeat, as a per-lease holder learns at its
// next renewal.
func (e *env) expire(k lease.Key) {
	e.t.Helper()
	e.behindTheBack(k, `expires_at = clock_timestamp() - interval '1 hour'`)
}

// replaceRun writes another run_id into the key's row, as if another run
// held it now; a heartbeat holder is told as by expire.
func (e *env) replaceRun(k lease.Key) {
	e.t.Helper()
	e.behindTheBack(k, `run_id = gen_random_uuid()`)
}

func (e *env) behindTheBack(k lease.Key, set string) {
	e.t.Helper()
	var n int
	require.NoError(e.t, e.raw.QueryRow(bg(), fmt.Sprintf(`WITH old AS MATERIALIZED (
  SELECT run_id, manager_id, expires_at FROM %[1]q.fencekit_leases WHERE account_id=$1 AND session_id=$2 FOR UPDATE),
upd AS (UPDATE %[1]q.fencekit_leases l SET `+set+` FROM old o WHERE l.account_id=$1 AND l.session_id=$2 RETURNING 1),
rec AS (INSERT INTO %[1]q.fencekit_displaced (run_id, account_id, session_id, displaced_at, by_run_id, manager_id, cause)
  SELECT run_id, $1, $2, clock_timestamp(), NULL, manager_id, 'revoked' FROM old
   WHERE expires_at = 'infinity' AND manager_id IS NOT NULL ON CONFLICT (run_id) DO NOTHING)
SELECT count(*) FROM upd`, e.schema), k.AccountID, k.SessionID).Scan(&n))
	require.Equal(e.t, 1, n)
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
