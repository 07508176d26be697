package mysqlguard

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardtest"
	"github.com/fencekit/fencekit/internal/netproxy"
)

var (
	_ guardtest.StrictWriter  = marksKit{}
	_ guardtest.OutcomeWriter = marksKit{}
	_ guardtest.StrictWriter  = fenceKit{}
	_ guardtest.OutcomeWriter = fenceKit{}
	_ guardtest.StrictWriter  = rowsKit{}
	_ guardtest.OutcomeWriter = rowsKit{}
	_ guardtest.FailingWriter = rowsKit{}
)

// replyHold is a pool of one connection through a fault proxy (short read
// timeout, one request per statement), for the kit's outcome-unknown
// check.
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

// marksKit is marksSubject (InTx) plus WriteStrict through a guard with
// Config.Strict over the same marks, and WriteHeld through InTx of a
// guard whose Config.DB is h's pool and whose held replies are released
// once its COMMIT has failed (f.healing): the settling read, on a fresh
// connection through the healed proxy, finds the COMMIT applied, so the
// guard reports success.
type marksKit struct {
	marksSubject
	strict, held *Guard
	h            *replyHold
}

func (s marksKit) WriteStrict(ctx context.Context, r string, c fence.Claim, v string) error {
	return marksSubject{f: s.f, g: s.strict, db: s.db}.WriteClaim(ctx, r, c, v)
}

func (s marksKit) WriteHeld(ctx context.Context, r string, tok fence.Token, v string, applied func()) error {
	var held bool
	err := s.h.run(ctx, applied, func(hold func()) error {
		return s.held.InTxClaim(ctx, r, fence.Claim{Token: tok}, func(ctx context.Context, tx *sql.Tx) error {
			if err := s.f.writeData(ctx, tx, r, int64(tok), v); err != nil {
				return err
			}
			hold() // the next request is the guard's COMMIT
			held = true
			return nil
		})
	})
	if held && err != nil {
		// The kit accepts an unknown outcome; this guard must do better:
		// its settling read reaches the server and finds the COMMIT.
		return errors.New("InTx with a lost COMMIT reply and a healed network did not settle: " + err.Error())
	}
	return err
}

// fenceKit is fenceSubject (Fence on Config.DB) plus WriteStrict through
// a strict guard's Fence, and WriteHeld through Fence of a guard whose
// Config.DB is h's pool: the settling read goes through the held proxy
// too and gets no answer, so the outcome stays unknown.
type fenceKit struct {
	fenceSubject
	strict, held *Guard
	h            *replyHold
}

func (s fenceKit) WriteStrict(ctx context.Context, r string, c fence.Claim, v string) error {
	return fenceSubject{marksSubject{f: s.f, g: s.strict, db: s.db}}.WriteClaim(ctx, r, c, v)
}

func (s fenceKit) WriteHeld(ctx context.Context, r string, tok fence.Token, v string, applied func()) error {
	return s.h.run(ctx, applied, func(hold func()) error {
		return s.held.Fence(ctx, r, tok, func(ctx context.Context) error {
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

// rowsKit is rowsSubject (in-row Upsert) plus WriteStrict through Rows
// with RowsConfig.Strict, and WriteHeld: one upsert on h's pool, its own
// transaction, whose reply is held (in-row mode does not settle).
type rowsKit struct {
	rowsSubject
	strict *Rows
	h      *replyHold
}

func (s rowsKit) WriteStrict(ctx context.Context, r string, c fence.Claim, v string) error {
	return s.strict.UpsertClaim(ctx, s.db, []any{r}, c, v)
}

func (s rowsKit) WriteHeld(ctx context.Context, r string, tok fence.Token, v string, applied func()) error {
	return s.h.run(ctx, applied, func(hold func()) error {
		hold() // the upsert is the only request
		return s.r.UpsertClaim(ctx, s.h.db, []any{r}, fence.Claim{Token: tok}, v)
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
			"InTxClaim":   g.InTxClaim(ctx, tc.r, tc.c, fn),
			"InTx":        g.InTx(fence.WithClaim(ctx, tc.c), tc.r, fn),
			"FenceTx":     g.FenceTxClaim(ctx, nil, tc.r, tc.c),
			"Fence":       g.Fence(fence.WithClaim(ctx, tc.c), tc.r, tc.c.Token, func(context.Context) error { return nil }),
			"UpsertClaim": rows.UpsertClaim(ctx, closed, []any{tc.r}, tc.c, "x"),
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
