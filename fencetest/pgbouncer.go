package fencetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/internal/pgbouncer"
)

// PgBouncer pool modes for PgBouncer.
const (
	PgBouncerSession     = pgbouncer.ModeSession
	PgBouncerTransaction = pgbouncer.ModeTransaction
)

// PgBouncer starts a private PgBouncer (the Debian package pgbouncer; the
// repository's scripts/install-pgbouncer.sh installs it) in front of the
// test database, in pool mode (PgBouncerSession or PgBouncerTransaction),
// on a free loopback port with its own configuration, and returns the URL
// that reaches the test database through it (same user and database). It
// is stopped and its files removed when the test ends, failed or not. A
// missing binary or server fails the test under CI and skips it otherwise
// (Missing).
//
// Behind PgBouncerTransaction use pgx's exec or simple_protocol mode
// (PoolAt): prepared statements of the default mode fail there.
func PgBouncer(t testing.TB, mode string) string {
	t.Helper()
	cc, err := pgx.ParseConfig(DatabaseURL())
	if err != nil {
		t.Fatalf("fencetest: bad TEST_DATABASE_URL: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := pgbouncer.Start(ctx, pgbouncer.Config{
		UpstreamHost: cc.Host, UpstreamPort: cc.Port, User: cc.User, Mode: mode, PoolSize: 30,
	}, cc.Database)
	if errors.Is(err, pgbouncer.ErrNotInstalled) {
		Missing(t, "%v", err)
	}
	if err != nil {
		t.Fatalf("fencetest: start PgBouncer (%s): %v", mode, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("PgBouncer (%s) log:\n%s", mode, s.Log())
		}
		if err := s.Stop(); err != nil {
			t.Errorf("fencetest: stop PgBouncer: %v", err)
		}
	})
	return s.URL(cc.User, cc.Database)
}
