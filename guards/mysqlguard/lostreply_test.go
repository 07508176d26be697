package mysqlguard

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/netproxy"
)

// proxiedDB opens a pool whose connections go through a fault proxy, with
// a short read timeout so a lost reply fails fast.
func proxiedDB(t *testing.T, adjust ...func(*mysql.Config)) (*sql.DB, *netproxy.Proxy) {
	t.Helper()
	p, err := netproxy.New(dsnConfig(t).Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	db := openDB(t, func(c *mysql.Config) {
		c.Addr = p.Addr()
		c.ReadTimeout = 500 * time.Millisecond
		c.WriteTimeout = 500 * time.Millisecond
		for _, a := range adjust {
			a(c)
		}
	})
	return db, p
}

// TestLostCommitReplyCommitted: COMMIT reaches the server and commits,
// its reply is lost (the connection's read times out), then the network
// heals. The locking read by write id, on a fresh connection of
// Config.DB, finds the mark set by this write: success.
func TestLostCommitReplyCommitted(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	db, p := proxiedDB(t)
	g := f.guard(t, Config{DB: db})
	g.beforeCommit = func() { p.Pause(netproxy.Downstream) }
	var commitErr error
	g.afterCommit = func(err error) { commitErr = err; p.Restore() }
	s := marksSubject{f: f, g: g, db: db}
	if err := s.Write(ctx, "lost/committed", 4, "four"); err != nil {
		t.Fatalf("committed write whose COMMIT reply was lost: %v", err)
	}
	if commitErr == nil {
		t.Fatal("COMMIT reported no error: the reply was not lost")
	}
	if v, tok, _, err := s.Read(ctx, "lost/committed"); err != nil || v != "four" || tok != 4 {
		t.Fatalf("stored %q %d %v", v, tok, err)
	}
}

// TestLostCommitNotCommitted: COMMIT is held on the way and the client
// gives up; then the connection is cut, so the server rolls the
// transaction back, and the network heals. The locking read, on a fresh
// connection of Config.DB, finds the old mark: the error is a
// *fence.NotAppliedError (not unknown), and nothing was written.
func TestLostCommitNotCommitted(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	db, p := proxiedDB(t)
	g := f.guard(t, Config{DB: db})
	s := marksSubject{f: f, g: g, db: db}
	const r = "lost/notcommitted"
	if err := s.Write(ctx, r, 2, "two"); err != nil {
		t.Fatal(err)
	}
	g.beforeCommit = func() { p.Pause(netproxy.Upstream) }
	g.afterCommit = func(error) { p.Cut(); p.Restore() }
	err := s.Write(ctx, r, 3, "three")
	p.Restore()
	g.beforeCommit, g.afterCommit = nil, nil
	ne, ok := fence.IsNotApplied(err)
	if !ok || ne.Op != "mysqlguard: commit" || ne.Resource != r || errors.Is(err, fence.ErrOutcomeUnknown) || errors.Is(err, fence.ErrStale) || errors.Is(err, fence.ErrBusy) {
		t.Fatalf("held COMMIT, rolled back: %v, want *fence.NotAppliedError of mysqlguard: commit", err)
	}
	if v, tok, _, err := s.Read(ctx, r); err != nil || v != "two" || tok != 2 {
		t.Fatalf("stored %q %d %v", v, tok, err)
	}
	if err := s.Write(ctx, r, 3, "three"); err != nil {
		t.Fatalf("retry: %v", err)
	}
}

// TestLostCommitUnsettled: COMMIT's reply is lost and the server stays
// unreachable for the settling read too: the error matches
// fence.ErrOutcomeUnknown. Once the network heals the write is found committed.
func TestLostCommitUnsettled(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	db, p := proxiedDB(t)
	g := f.guard(t, Config{DB: db, SettleTimeout: time.Second}) // settles on db, through the held proxy
	g.beforeCommit = func() { p.Pause(netproxy.Downstream) }
	s := marksSubject{f: f, g: g, db: db}
	err := s.Write(ctx, "lost/unsettled", 5, "five")
	p.Restore()
	if !errors.Is(err, fence.ErrOutcomeUnknown) || errors.Is(err, fence.ErrBusy) || errors.Is(err, fence.ErrStale) {
		t.Fatalf("unsettled COMMIT: %v, want fence.ErrOutcomeUnknown only", err)
	}
	if oe, ok := fence.IsOutcomeUnknown(err); !ok || oe.Op != "mysqlguard: commit" || oe.Resource != "lost/unsettled" {
		t.Fatalf("unsettled COMMIT: %#v, want *fence.OutcomeUnknownError of mysqlguard: commit", err)
	}
	if v, tok, _, err := (marksSubject{f: f, g: g, db: f.db}).Read(ctx, "lost/unsettled"); err != nil || v != "five" || tok != 5 {
		t.Fatalf("stored %q %d %v", v, tok, err)
	}
}

// TestLostInRowCommitReply: in-row mode's own transaction (on a *sql.DB)
// commits, the COMMIT's reply is lost: the error is a
// *fence.OutcomeUnknownError of the commit; the row holds the write; sending
// the same upsert again succeeds.
func TestLostInRowCommitReply(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	db, p := proxiedDB(t, func(c *mysql.Config) { c.InterpolateParams = true })
	rows := f.inRow(t, RowsConfig{})
	c := fence.Claim{Token: 8, Run: "run-a"}
	if err := rows.Upsert(fence.WithClaim(ctx, fence.Claim{Token: 7}), db, []any{"lost/row"}, "seven"); err != nil {
		t.Fatal(err)
	}
	rows.beforeCommit = func() { p.Pause(netproxy.Downstream) }
	err := rows.Upsert(fence.WithClaim(ctx, c), db, []any{"lost/row"}, "eight")
	p.Restore()
	rows.beforeCommit = nil
	if !errors.Is(err, fence.ErrOutcomeUnknown) || errors.Is(err, fence.ErrBusy) {
		t.Fatalf("lost COMMIT reply: %v, want fence.ErrOutcomeUnknown", err)
	}
	if oe, ok := fence.IsOutcomeUnknown(err); !ok || oe.Op != "mysqlguard: commit" || oe.Resource != "lost/row" {
		t.Fatalf("lost COMMIT reply: %#v, want *fence.OutcomeUnknownError of mysqlguard: commit", err)
	}
	s := rowsSubject{f: f, r: rows, db: f.db}
	if v, tok, _, err := s.Read(ctx, "lost/row"); err != nil || v != "eight" || tok != 8 {
		t.Fatalf("stored %q %d %v (the COMMIT had reached the server)", v, tok, err)
	}
	if err := rows.Upsert(fence.WithClaim(ctx, c), db, []any{"lost/row"}, "eight"); err != nil {
		t.Fatalf("sending the same upsert again: %v", err)
	}
}
