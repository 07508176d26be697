package pgguard_test

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/guards/guardtest"
	"github.com/fencekit/fencekit/guards/pgguard"
)

var errInjected = errors.New("injected")

// writeFunc performs one guarded write of v to r. c is the explicit claim,
// or nil for the ctx-first form (the claim is then the one ctx carries).
// fail makes the write fail after it wrote its row.
type writeFunc func(ctx context.Context, r string, c *fence.Claim, v string, fail bool) error

// subject adapts one entry point to every interface of the conformance kit:
// Write and WriteFailing present fence.ClaimFor(ctx, token), WriteClaim an
// explicit claim, WriteContext the claim in ctx, WriteStrict an explicit
// claim to the same entry point of a strict guard (Config.Strict) over the
// same marks.
type subject struct {
	write  writeFunc
	strict writeFunc
	read   func(ctx context.Context, r string) (string, fence.Token, bool, error)
	guard  fence.Guard // a guard over the same marks (nil: none, in-row mode)
}

// Guard is a guard over the subject's marks (guardtest.Fencer).
func (s *subject) Guard() fence.Guard { return s.guard }

var (
	_ guardtest.ClaimWriter   = (*subject)(nil)
	_ guardtest.ContextWriter = (*subject)(nil)
	_ guardtest.FailingWriter = (*subject)(nil)
	_ guardtest.StrictWriter  = (*subject)(nil)
	_ guardtest.OutcomeWriter = (*heldSubject)(nil)
)

func (s *subject) WriteStrict(ctx context.Context, r string, c fence.Claim, v string) error {
	return s.strict(ctx, r, &c, v, false)
}

// heldFunc is a guarded write whose COMMIT (or autocommit statement) has
// its reply held until ctx ends (guardtest.OutcomeWriter).
type heldFunc func(ctx context.Context, r string, tok fence.Token, v string, applied func()) error

// heldSubject is a subject whose entry point commits itself (InTx, Fence,
// InSQLTx, in-row autocommit): it also runs the kit's outcome-unknown
// check. Entry points whose COMMIT is the caller's (Begin, FenceTx) do not.
type heldSubject struct {
	*subject
	held heldFunc
}

func (s *heldSubject) WriteHeld(ctx context.Context, r string, tok fence.Token, v string, applied func()) error {
	return s.held(ctx, r, tok, v, applied)
}

func (s *subject) Write(ctx context.Context, r string, tok fence.Token, v string) error {
	c := fence.ClaimFor(ctx, tok)
	return s.write(ctx, r, &c, v, false)
}

func (s *subject) WriteClaim(ctx context.Context, r string, c fence.Claim, v string) error {
	return s.write(ctx, r, &c, v, false)
}

func (s *subject) WriteContext(ctx context.Context, r, v string) error {
	return s.write(ctx, r, nil, v, false)
}

func (s *subject) WriteFailing(ctx context.Context, r string, tok fence.Token) error {
	c := fence.ClaimFor(ctx, tok)
	return s.write(ctx, r, &c, "failing", true)
}

func (s *subject) Read(ctx context.Context, r string) (string, fence.Token, bool, error) {
	return s.read(ctx, r)
}

// tokenOf is the token the guarded row records: the explicit claim's, or
// the one in ctx.
func tokenOf(ctx context.Context, c *fence.Claim) int64 {
	if c != nil {
		return int64(c.Token)
	}
	cc, _ := fence.ClaimFromContext(ctx)
	return int64(cc.Token)
}

// roundRobin hands out n independent pools in turn.
type roundRobin struct {
	pools []*pgxpool.Pool
	next  atomic.Uint64
}

func newRoundRobin(t *testing.T, n int) *roundRobin {
	rr := &roundRobin{}
	for range n {
		rr.pools = append(rr.pools, fencetest.Pool(t))
	}
	return rr
}

func (rr *roundRobin) pool() *pgxpool.Pool {
	return rr.pools[rr.next.Add(1)%uint64(len(rr.pools))]
}

// rowWriter returns the write callback of a marks-mode entry point: upsert
// the guarded row, then fail if asked.
func rowWriter(schema, r, v string, tok int64, fail bool) func(ctx context.Context, tx pgx.Tx) error {
	return func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, upsertSQL(schema), r, v, tok); err != nil {
			return err
		}
		if fail {
			return errInjected
		}
		return nil
	}
}

func runKit(t *testing.T, s guardtest.Subject) {
	guardtest.Run(t, guardtest.Config{New: func(*testing.T) guardtest.Subject { return s }})
}

// marksKit is a marks-mode subject with the Config its guards share
// (Schema set).
type marksKit struct {
	*subject
	cfg    pgguard.Config
	schema string
}

// member is one writer of a marks-mode subject: a guard over its own pool
// (and its own *sql.DB for database/sql subjects).
type member struct {
	g    *pgguard.Guard
	pool *pgxpool.Pool
	db   *sql.DB
}

// ring hands out members over independent databases in turn.
type ring struct {
	ms   []member
	next atomic.Uint64
}

func (r *ring) take() member { return r.ms[r.next.Add(1)%uint64(len(r.ms))] }

// dbKind says whether the members of a marks-mode subject open a *sql.DB
// each (withSQL) or not (pgxOnly).
type dbKind bool

const (
	pgxOnly dbKind = false
	withSQL dbKind = true
)

// marksSubject builds the subject of one marks-mode entry point: write
// gets four members over independent pools (and *sql.DB when kind is
// withSQL), and strict four Config.Strict guards over the same databases
// and marks.
func marksSubject(t *testing.T, cfg pgguard.Config, kind dbKind, write func(r *ring, schema string) writeFunc) *marksKit {
	schema := setupSchema(t)
	cfg.Schema = schema
	plain, strict := &ring{}, &ring{}
	for range 4 {
		m := member{pool: fencetest.Pool(t)}
		c := cfg
		c.DB = m.pool
		if kind == withSQL {
			m.db = sqlDB(t)
			c.SQLDB = m.db
		}
		m.g = newGuard(t, c)
		plain.ms = append(plain.ms, m)
		c.Strict = true
		m.g = newGuard(t, c)
		strict.ms = append(strict.ms, m)
	}
	reader := fencetest.Pool(t)
	return &marksKit{
		subject: &subject{
			write:  write(plain, schema),
			strict: write(strict, schema),
			read: func(ctx context.Context, r string) (string, fence.Token, bool, error) {
				return readRow(ctx, reader, schema, r)
			},
			guard: plain.ms[0].g,
		},
		cfg: cfg, schema: schema,
	}
}

// guard returns a guard of k's Config over the given databases.
func (k *marksKit) guard(t *testing.T, pool *pgxpool.Pool, db *sql.DB) *pgguard.Guard {
	c := k.cfg
	if pool != nil {
		c.DB = pool
	}
	if db != nil {
		c.SQLDB = db
	}
	return newGuard(t, c)
}

// held returns k's subject with the outcome-unknown check, whose held write
// is made by held.
func (k *marksKit) held(held heldFunc) *heldSubject {
	return &heldSubject{subject: k.subject, held: held}
}

// InTx and InTxClaim: the guard begins (one batch with the fence), runs the
// callback and commits.
func inTxWrite(g *pgguard.Guard, schema string) writeFunc {
	return func(ctx context.Context, r string, c *fence.Claim, v string, fail bool) error {
		fn := rowWriter(schema, r, v, tokenOf(ctx, c), fail)
		if c == nil {
			return g.InTx(ctx, r, fn)
		}
		return g.InTx(fence.WithClaim(ctx, *c), r, fn)
	}
}

func inTxRing(rg *ring, schema string) writeFunc {
	return func(ctx context.Context, r string, c *fence.Claim, v string, fail bool) error {
		return inTxWrite(rg.take().g, schema)(ctx, r, c, v, fail)
	}
}

func TestConformanceInTx(t *testing.T) {
	for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable} {
		t.Run(string(iso), func(t *testing.T) {
			k := marksSubject(t, pgguard.Config{IsoLevel: iso}, pgxOnly, inTxRing)
			h := newReplyHold(t)
			hg := k.guard(t, h.pool, nil)
			runKit(t, k.held(func(ctx context.Context, r string, tok fence.Token, v string, applied func()) error {
				return h.run(applied, func(hold func()) error {
					return hg.InTx(fence.WithClaim(ctx, fence.ClaimFor(ctx, tok)), r, heldRowWriter(k.schema, r, v, tok, hold))
				})
			}))
		})
	}
}

// Begin and BeginClaim hand over the fenced transaction; the caller writes
// and commits.
func TestConformanceBegin(t *testing.T) {
	runKit(t, marksSubject(t, pgguard.Config{}, pgxOnly, func(rg *ring, schema string) writeFunc {
		return func(ctx context.Context, r string, c *fence.Claim, v string, fail bool) error {
			var (
				tx  pgx.Tx
				err error
				g   = rg.take().g
			)
			if c == nil {
				tx, err = g.Begin(ctx, r)
			} else {
				tx, err = g.Begin(fence.WithClaim(ctx, *c), r)
			}
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
			if err := rowWriter(schema, r, v, tokenOf(ctx, c), fail)(ctx, tx); err != nil {
				return err
			}
			return tx.Commit(ctx)
		}
	}))
}

// FenceTx and FenceTxClaim inside a transaction the caller opened, after the
// caller wrote its row: a refusal must also undo that earlier write. The
// subject's own BEGIN reports an ended ctx the way the guard does
// (fence.WrapContext), as a caller should.
func TestConformanceFenceTxInCallerTx(t *testing.T) {
	runKit(t, marksSubject(t, pgguard.Config{}, pgxOnly, func(rg *ring, schema string) writeFunc {
		return func(ctx context.Context, r string, c *fence.Claim, v string, fail bool) error {
			m := rg.take()
			g := m.g
			if badInput(ctx, r, c) {
				// The guard's own refusal, before the subject writes its row.
				if c == nil {
					return g.FenceTx(ctx, nil, r)
				}
				return g.FenceTx(fence.WithClaim(ctx, *c), nil, r)
			}
			tx, err := m.pool.Begin(ctx)
			if err != nil {
				return fence.WrapContext(ctx, err)
			}
			defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
			if _, err := tx.Exec(ctx, upsertSQL(schema), r, v, tokenOf(ctx, c)); err != nil {
				return err
			}
			if c == nil {
				err = g.FenceTx(ctx, tx, r)
			} else {
				err = g.FenceTx(fence.WithClaim(ctx, *c), tx, r)
			}
			if err != nil {
				return err
			}
			if fail {
				return errInjected
			}
			return tx.Commit(ctx)
		}
	}))
}

// badInput reports whether the guard refuses r and the claim (explicit, or
// ctx's when c is nil) before any I/O.
func badInput(ctx context.Context, r string, c *fence.Claim) bool {
	if fence.ValidateResource(r) != nil {
		return true
	}
	if c == nil {
		_, err := fence.ClaimFromContext(ctx)
		return err != nil
	}
	return c.Validate() != nil
}

// plainDB hides SendBatch, so Guard.Fence takes its two-round-trip path
// (BeginTx, then the fence statement).
type plainDB struct{ p *pgxpool.Pool }

func (d plainDB) BeginTx(ctx context.Context, o pgx.TxOptions) (pgx.Tx, error) {
	return d.p.BeginTx(ctx, o)
}

func (d plainDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return d.p.QueryRow(ctx, sql, args...)
}

// Guard.Fence, the fence.Guard method, on several guards with independent
// pools (batched, and without a Batcher); the ctx form runs through InTx.
func TestConformanceFence(t *testing.T) {
	for _, batch := range []bool{true, false} {
		name := "batcher"
		if !batch {
			name = "no-batcher"
		}
		t.Run(name, func(t *testing.T) {
			schema := setupSchema(t)
			rr := newRoundRobin(t, 4)
			dbOf := func(p *pgxpool.Pool) pgguard.DB {
				if !batch {
					return plainDB{p}
				}
				return p
			}
			var guards, stricts []*pgguard.Guard
			for _, p := range rr.pools {
				guards = append(guards, newGuard(t, pgguard.Config{Schema: schema, DB: dbOf(p)}))
				stricts = append(stricts, newGuard(t, pgguard.Config{Schema: schema, DB: dbOf(p), Strict: true}))
			}
			var next atomic.Uint64
			write := func(guards []*pgguard.Guard) writeFunc {
				return func(ctx context.Context, r string, c *fence.Claim, v string, fail bool) error {
					g := guards[next.Add(1)%uint64(len(guards))]
					if c == nil {
						return inTxWrite(g, schema)(ctx, r, nil, v, fail)
					}
					if c.Run != "" || c.Scope != "" {
						ctx = fence.WithClaim(ctx, *c) // Fence takes the run and scope from ctx's claim for its token
					}
					return g.Fence(ctx, r, c.Token, fenceRowWriter(schema, r, v, c.Token, fail, nil))
				}
			}
			h := newReplyHold(t)
			held := newGuard(t, pgguard.Config{Schema: schema, DB: dbOf(h.pool)})
			reader := fencetest.Pool(t)
			runKit(t, &heldSubject{
				subject: &subject{
					write:  write(guards),
					strict: write(stricts),
					read: func(ctx context.Context, r string) (string, fence.Token, bool, error) {
						return readRow(ctx, reader, schema, r)
					},
					guard: guards[0],
				},
				held: func(ctx context.Context, r string, tok fence.Token, v string, applied func()) error {
					return h.run(applied, func(hold func()) error {
						return held.Fence(ctx, r, tok, fenceRowWriter(schema, r, v, tok, false, hold))
					})
				},
			})
		})
	}
}

// fenceRowWriter is Guard.Fence's write callback: it checks the ctx it is
// given, upserts the row, then starts the hold (if any) or fails (if
// asked).
func fenceRowWriter(schema, r, v string, tok fence.Token, fail bool, hold func()) func(context.Context) error {
	return func(ctx context.Context) error {
		tx, ok := pgguard.TxFromContext(ctx)
		if !ok {
			return errors.New("no tx in ctx")
		}
		if got, ok := fence.FromContext(ctx); !ok || got != tok {
			return errors.New("write's ctx lacks the token")
		}
		if err := rowWriter(schema, r, v, int64(tok), fail)(ctx, tx); err != nil {
			return err
		}
		if hold != nil {
			hold()
		}
		return nil
	}
}

// sqlDB opens a database/sql handle through pgx's stdlib driver, closed at
// cleanup: an independent set of connections.
func sqlDB(t testing.TB) *sql.DB {
	t.Helper()
	fencetest.SkipShort(t)
	db, err := sql.Open("pgx", fencetest.DatabaseURL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, db.PingContext(bg()))
	return db
}

func sqlUpsert(ctx context.Context, tx *sql.Tx, schema, r, v string, tok int64, fail bool) error {
	if _, err := tx.ExecContext(ctx, upsertSQL(schema), r, v, tok); err != nil {
		return err
	}
	if fail {
		return errInjected
	}
	return nil
}

// InSQLTx and InSQLTxClaim on database/sql, four independent *sql.DB.
func TestConformanceInSQLTx(t *testing.T) {
	for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.Serializable} {
		t.Run(string(iso), func(t *testing.T) {
			k := marksSubject(t, pgguard.Config{IsoLevel: iso}, withSQL, func(rg *ring, schema string) writeFunc {
				return func(ctx context.Context, r string, c *fence.Claim, v string, fail bool) error {
					g := rg.take().g
					fn := func(ctx context.Context, tx *sql.Tx) error {
						return sqlUpsert(ctx, tx, schema, r, v, tokenOf(ctx, c), fail)
					}
					if c == nil {
						return g.InSQLTx(ctx, r, fn)
					}
					return g.InSQLTx(fence.WithClaim(ctx, *c), r, fn)
				}
			})
			h := newReplyHold(t)
			hg := k.guard(t, nil, h.db)
			runKit(t, k.held(func(ctx context.Context, r string, tok fence.Token, v string, applied func()) error {
				return h.run(applied, func(hold func()) error {
					return hg.InSQLTx(fence.WithClaim(ctx, fence.ClaimFor(ctx, tok)), r, func(ctx context.Context, tx *sql.Tx) error {
						if err := sqlUpsert(ctx, tx, k.schema, r, v, int64(tok), false); err != nil {
							return err
						}
						hold() // the COMMIT's reply is held
						return nil
					})
				})
			}))
		})
	}
}

// FenceSQLTx and FenceSQLTxClaim in a database/sql transaction the caller
// opened, after the caller wrote its row.
func TestConformanceFenceSQLTxInCallerTx(t *testing.T) {
	runKit(t, marksSubject(t, pgguard.Config{}, withSQL, func(rg *ring, schema string) writeFunc {
		return func(ctx context.Context, r string, c *fence.Claim, v string, fail bool) error {
			m := rg.take()
			g := m.g
			if badInput(ctx, r, c) {
				if c == nil {
					return g.FenceSQLTx(ctx, nil, r)
				}
				return g.FenceSQLTx(fence.WithClaim(ctx, *c), nil, r)
			}
			tx, err := m.db.BeginTx(ctx, nil)
			if err != nil {
				return fence.WrapContext(ctx, err)
			}
			defer func() { _ = tx.Rollback() }()
			if _, err := tx.ExecContext(ctx, upsertSQL(schema), r, v, tokenOf(ctx, c)); err != nil {
				return err
			}
			if c == nil {
				err = g.FenceSQLTx(ctx, tx, r)
			} else {
				err = g.FenceSQLTx(fence.WithClaim(ctx, *c), tx, r)
			}
			if err != nil {
				return err
			}
			if fail {
				return errInjected
			}
			return tx.Commit()
		}
	}))
}
