package mysqlguard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardtest"
	"github.com/fencekit/fencekit/internal/netproxy"
)

var (
	_ guardtest.StrictWriter    = marksKit{}
	_ guardtest.OutcomeWriter   = marksKit{}
	_ guardtest.DuplicateWriter = marksKit{}
	_ guardtest.StrictWriter    = fenceKit{}
	_ guardtest.OutcomeWriter   = fenceKit{}
	_ guardtest.DuplicateWriter = fenceKit{}
	_ guardtest.StrictWriter    = rowsKit{}
	_ guardtest.OutcomeWriter   = rowsKit{}
	_ guardtest.DuplicateWriter = rowsKit{}
	_ guardtest.FailingWriter   = rowsKit{}
)

// replyHold is a pool of one connection through a fault proxy of its own
// (short read timeout, one request per statement), for one call of the
// kit's outcome-unknown check: each call has its own, so calls on
// different resources run concurrently.
type replyHold struct {
	db *sql.DB
	p  *netproxy.Proxy
}

func newReplyHold(t *testing.T) *replyHold {
	t.Helper()
	db, p := proxiedDB(t, func(c *mysql.Config) { c.InterpolateParams = true })
	db.SetMaxOpenConns(1)
	return &replyHold{db: db, p: p}
}

// close releases the pool and the proxy before the test ends.
func (h *replyHold) close() {
	_ = h.db.Close()
	_ = h.p.Close()
}

// run calls write, which calls hold at the point from which the server's
// replies are to be held (just before the committing request is sent):
// the first reply that then reaches the proxy (the answer to that
// request, which the server has therefore processed) calls applied, and
// no reply reaches the client until write returns. The pool's connection
// is opened first, so that the held reply is not a handshake's.
func (h *replyHold) run(ctx context.Context, applied func(), write func(hold func()) error) error {
	if err := h.db.PingContext(ctx); err != nil {
		return err
	}
	defer func() {
		h.p.OnHold(nil)
		h.p.Restore()
	}()
	return write(func() {
		var once sync.Once
		h.p.OnHold(func(netproxy.Direction) { once.Do(applied) })
		h.p.Pause(netproxy.Downstream)
	})
}

// firstConnDB opens a pool with the DSN's own timeouts (none) whose first
// connection goes through a fault proxy of its own and every later one
// straight to the server: a fault on the proxy affects that connection
// only. The pool's first connection is open when it returns.
func firstConnDB(t *testing.T) (*sql.DB, *netproxy.Proxy) {
	t.Helper()
	p, err := netproxy.New(dsnConfig(t).Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	var dials atomic.Int32
	db := openDB(t, func(c *mysql.Config) {
		c.InterpolateParams = true
		c.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if dials.Add(1) == 1 {
				addr = p.Addr()
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
	})
	return db, p
}

// delayed is WriteDelayed for a write made by write on a pool whose first
// connection (the one the write uses) runs through a proxy: write calls
// hold just before the committing request, which the proxy then holds
// (with everything after it on that connection). deliver releases it and
// returns once the proxy's connection is gone (the server answered, and
// the client had closed its end) and a locking read of lockSQL finds the
// row free (the held transaction has ended).
func delayed(t *testing.T, f fixture, lockSQL, r string, write func(db *sql.DB, hold func()) error) (func(context.Context) error, error) {
	db, p := firstConnDB(t)
	var held atomic.Bool
	err := write(db, func() { held.Store(true); p.Pause(netproxy.Upstream) })
	deliver := func(ctx context.Context) error {
		defer func() { _ = p.Close() }()
		p.Restore()
		// Idle connections close now; a held one was dropped by the guard.
		_ = db.Close()
		if !held.Load() {
			return fmt.Errorf("the write reached no COMMIT: %w", guardtest.ErrNothingHeld)
		}
		for p.Live() > 0 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("the held connection is still open: %w", ctx.Err())
			case <-time.After(10 * time.Millisecond):
			}
		}
		tx, err := f.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer rollback(tx)
		q, err := tx.QueryContext(ctx, lockSQL, r)
		if err != nil {
			return fmt.Errorf("waiting for the held transaction to end: %w", err)
		}
		defer q.Close() //nolint:errcheck // q.Err reports what matters
		for q.Next() {
		}
		return q.Err()
	}
	return deliver, err
}

// marksKit is marksSubject (InTx) plus WriteStrict through a guard with
// Config.Strict over the same marks; WriteHeld through InTx of a guard
// whose Config.DB is a replyHold's pool and whose held replies are
// released once its COMMIT has failed (f.healing): the settling read, on a
// fresh connection through the healed proxy, finds the COMMIT applied, so
// the guard reports success; and WriteDelayed through InTx on a pool whose
// first connection's COMMIT is held.
type marksKit struct {
	marksSubject
	t      *testing.T
	iso    sql.IsolationLevel
	strict *Guard
}

func (s marksKit) WriteStrict(ctx context.Context, r string, c fence.Claim, v string) error {
	return marksSubject{f: s.f, g: s.strict, db: s.db}.WriteClaim(ctx, r, c, v)
}

func (s marksKit) WriteHeld(ctx context.Context, r string, tok fence.Token, v string, applied func()) error {
	h := newReplyHold(s.t)
	defer h.close()
	g := s.f.healing(s.t, Config{DB: h.db, IsoLevel: s.iso}, h)
	var held bool
	err := h.run(ctx, applied, func(hold func()) error {
		return g.InTx(fence.WithClaim(ctx, fence.Claim{Token: tok}), r, func(ctx context.Context, tx *sql.Tx) error {
			if err := s.f.writeData(ctx, tx, r, int64(tok), v); err != nil {
				return err
			}
			hold() // the next request is the guard's COMMIT
			held = true
			return nil
		})
	})
	if se, stale := fence.IsStale(err); held && err != nil && (!stale || !se.Overtaken) {
		// The kit accepts an unknown outcome; this guard must do better:
		// its settling read reaches the server and finds the COMMIT, or
		// (when writers run concurrently) a newer mark that overtook it.
		return errors.New("InTx with a lost COMMIT reply and a healed network did not settle: " + err.Error())
	}
	return err
}

func (s marksKit) WriteDelayed(ctx context.Context, r string, c fence.Claim, v string) (func(context.Context) error, error) {
	return delayed(s.t, s.f, s.f.marksLockSQL(), r, func(db *sql.DB, hold func()) error {
		g := s.f.guard(s.t, Config{DB: db, IsoLevel: s.iso, SettleTimeout: settleTimeout})
		g.beforeCommit = hold
		return marksSubject{f: s.f, g: g, db: db}.WriteClaim(ctx, r, c, v)
	})
}

// fenceKit is fenceSubject (Fence on Config.DB) plus WriteStrict through
// a strict guard's Fence; WriteHeld through Fence of a guard whose
// Config.DB is a replyHold's pool: the settling read goes through the held
// proxy too and gets no answer, so the outcome stays unknown; and
// WriteDelayed as marksKit's, through Fence.
type fenceKit struct {
	fenceSubject
	t      *testing.T
	strict *Guard
}

func (s fenceKit) WriteStrict(ctx context.Context, r string, c fence.Claim, v string) error {
	return fenceSubject{marksSubject{f: s.f, g: s.strict, db: s.db}}.WriteClaim(ctx, r, c, v)
}

func (s fenceKit) WriteHeld(ctx context.Context, r string, tok fence.Token, v string, applied func()) error {
	h := newReplyHold(s.t)
	defer h.close()
	g := s.f.guard(s.t, Config{DB: h.db, SettleTimeout: settleTimeout})
	return h.run(ctx, applied, func(hold func()) error {
		return g.Fence(ctx, r, tok, func(ctx context.Context) error {
			tx, ok := TxFromContext(ctx)
			if !ok {
				return errors.New("no transaction in the write's ctx")
			}
			if err := s.f.writeData(ctx, tx, r, int64(tok), v); err != nil {
				return err
			}
			hold()
			return nil
		})
	})
}

func (s fenceKit) WriteDelayed(ctx context.Context, r string, c fence.Claim, v string) (func(context.Context) error, error) {
	return delayed(s.t, s.f, s.f.marksLockSQL(), r, func(db *sql.DB, hold func()) error {
		g := s.f.guard(s.t, Config{DB: db, SettleTimeout: settleTimeout})
		g.beforeCommit = hold
		return fenceSubject{marksSubject{f: s.f, g: g, db: db}}.WriteClaim(ctx, r, c, v)
	})
}

// rowsKit is rowsSubject (in-row Upsert) plus WriteStrict through Rows
// with RowsConfig.Strict; WriteHeld: one Upsert on a replyHold's pool (its
// own transaction) whose COMMIT reply is held (in-row mode does not
// settle); and WriteDelayed: one Upsert whose COMMIT request is held.
type rowsKit struct {
	rowsSubject
	t      *testing.T
	strict *Rows
}

func (s rowsKit) WriteStrict(ctx context.Context, r string, c fence.Claim, v string) error {
	return s.strict.Upsert(fence.WithClaim(ctx, c), s.db, []any{r}, v)
}

func (s rowsKit) WriteHeld(ctx context.Context, r string, tok fence.Token, v string, applied func()) error {
	h := newReplyHold(s.t)
	defer h.close()
	return h.run(ctx, applied, func(hold func()) error {
		rows := s.f.inRow(s.t, RowsConfig{})
		rows.beforeCommit = hold
		return rows.Upsert(fence.WithClaim(ctx, fence.Claim{Token: tok}), h.db, []any{r}, v)
	})
}

func (s rowsKit) WriteDelayed(ctx context.Context, r string, c fence.Claim, v string) (func(context.Context) error, error) {
	return delayed(s.t, s.f, "SELECT fence_token FROM "+s.f.rows+" WHERE resource = ? FOR UPDATE", r, func(db *sql.DB, hold func()) error {
		rows := s.f.inRow(s.t, RowsConfig{})
		rows.beforeCommit = hold
		return rows.Upsert(fence.WithClaim(ctx, c), db, []any{r}, v)
	})
}

// TestStrictRefusesBeforeIO: a strict guard (and strict Rows) refuses a
// resource outside the claim's scope, and a claim without a scope, with
// *fence.ScopeError without sending anything: the pool is closed, so any
// request would fail with sql: database is closed instead.
func TestStrictRefusesBeforeIO(t *testing.T) {
	f := newFixture(t)
	closed := openDB(t, nil)
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	g := f.guard(t, Config{DB: closed, Strict: true})
	rows := f.inRow(t, RowsConfig{Strict: true})
	ctx := context.Background()
	fn := func(context.Context, *sql.Tx) error {
		t.Error("InTx ran its function outside the claim's scope")
		return nil
	}
	scoped := fence.Claim{Token: 3, Scope: "acme/conv-1"}
	for _, tc := range []struct {
		r string
		c fence.Claim
	}{{"acme/conv-2/notes", scoped}, {"acme/conv-1/notes", fence.Claim{Token: 3}}} {
		for name, err := range map[string]error{
			"InTxClaim":   g.InTx(fence.WithClaim(ctx, tc.c), tc.r, fn),
			"InTx":        g.InTx(fence.WithClaim(ctx, tc.c), tc.r, fn),
			"FenceTx":     g.FenceTx(fence.WithClaim(ctx, tc.c), nil, tc.r),
			"Fence":       g.Fence(fence.WithClaim(ctx, tc.c), tc.r, tc.c.Token, func(context.Context) error { return nil }),
			"UpsertClaim": rows.Upsert(fence.WithClaim(ctx, tc.c), closed, []any{tc.r}, "x"),
			"Upsert":      rows.Upsert(fence.WithClaim(ctx, tc.c), closed, []any{tc.r}, "x"),
		} {
			se, ok := fence.IsOutOfScope(err)
			if !ok || *se != (fence.ScopeError{Resource: tc.r, Scope: tc.c.Scope}) {
				t.Errorf("%s(%q) under scope %q: %v, want *fence.ScopeError", name, tc.r, tc.c.Scope, err)
			}
		}
	}
}

// settleTimeout bounds the held guards' settling read: through the held
// proxy it gets no answer.
const settleTimeout = time.Second

// healing returns a guard on cfg.DB (h's pool) that releases h's held
// replies as soon as its COMMIT has returned, as a network that heals
// after one connection's reply was lost: the settling read then reaches
// the server.
func (f fixture) healing(t *testing.T, cfg Config, h *replyHold) *Guard {
	t.Helper()
	g := f.guard(t, cfg)
	g.afterCommit = func(error) {
		h.p.OnHold(nil)
		h.p.Restore()
	}
	return g
}

// marksLockSQL is a locking read of a marks row (one ? for the resource).
func (f fixture) marksLockSQL() string {
	return "SELECT token FROM " + f.marks + " WHERE resource = ? FOR UPDATE"
}
