package pgbouncer

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib" // also the database/sql driver "pgx"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/guards/guardtest"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/internal/netproxy"
	"github.com/fencekit/fencekit/sql/migrations"
)

var errInjected = errors.New("injected failure after the write")

// guardSubject drives pgguard through PgBouncer: each write goes through
// one of several guards, each over its own independent pool (pgx:
// InTx/InTxClaim; database/sql: InSQLTx/InSQLTxClaim), and reads use
// another.
type guardSubject struct {
	gs      []*pgguard.Guard
	stricts []*pgguard.Guard // Config.Strict over the same databases and marks (WriteStrict)
	next    atomic.Uint64
	schema  string
	write   func(ctx context.Context, g *pgguard.Guard, r string, c *fence.Claim, fn func(exec func(ctx context.Context, sql string, args ...any) error) error) error
	read    *pgxpool.Pool
	held    *heldGuard // the guard whose replies can be held (WriteHeld)
}

// heldGuard is a guard whose one connection reaches PgBouncer through a
// proxy that can hold PgBouncer's replies back (guardtest.OutcomeWriter).
// Its pool runs in pgx's exec mode, which sends COMMIT in one round trip
// (a first use in the cache modes prepares it in a round trip of its own,
// whose reply the hold would catch instead).
type heldGuard struct {
	mu sync.Mutex // one WriteHeld at a time: one's cleanup must not lift another's hold
	p  *netproxy.Proxy
	g  *pgguard.Guard
}

// newHeldProxy starts a proxy in front of the PgBouncer at url and returns
// it with the pgx config of a one-connection pool through it.
func newHeldProxy(t *testing.T, url string) (*netproxy.Proxy, *pgxpool.Config) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	p, err := netproxy.New(net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() }) // after the pool's cleanup (LIFO)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = p.Host(), p.Port()
	cfg.ConnConfig.Fallbacks = nil
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	cfg.MaxConns = 1
	return p, cfg
}

// upsert is the guarded write of every subject.
func (s *guardSubject) upsert(ctx context.Context, exec func(ctx context.Context, sql string, args ...any) error, r, v string, tok int64) error {
	return exec(ctx, fmt.Sprintf(`INSERT INTO %q.guarded (resource, value, token) VALUES ($1, $2, $3)
ON CONFLICT (resource) DO UPDATE SET value = EXCLUDED.value, token = EXCLUDED.token`, s.schema), r, v, tok)
}

// WriteHeld writes through the held guard and holds PgBouncer's replies
// from the guard's COMMIT on: the first reply that reaches the proxy (the
// COMMIT's, so the database has committed) calls applied; none reaches the
// guard until it returns.
func (s *guardSubject) WriteHeld(ctx context.Context, r string, tok fence.Token, v string, applied func()) error {
	h := s.held
	h.mu.Lock()
	defer h.mu.Unlock()
	defer func() {
		h.p.OnHold(nil)
		h.p.Restore()
	}()
	c := fence.ClaimFor(ctx, tok)
	return s.write(ctx, h.g, r, &c, func(exec func(ctx context.Context, sql string, args ...any) error) error {
		if err := s.upsert(ctx, exec, r, v, int64(tok)); err != nil {
			return err
		}
		var once sync.Once
		h.p.OnHold(func(netproxy.Direction) { once.Do(applied) })
		h.p.Pause(netproxy.Downstream)
		return nil
	})
}

// take returns the next guard of gs in turn.
func (s *guardSubject) take(gs []*pgguard.Guard) *pgguard.Guard {
	return gs[s.next.Add(1)%uint64(len(gs))]
}

func (s *guardSubject) do(ctx context.Context, r string, c *fence.Claim, v string, fail bool) error {
	return s.doWith(ctx, s.take(s.gs), r, c, v, fail)
}

func (s *guardSubject) doWith(ctx context.Context, g *pgguard.Guard, r string, c *fence.Claim, v string, fail bool) error {
	tok := int64(0)
	if c != nil {
		tok = int64(c.Token)
	} else if cc, err := fence.ClaimFromContext(ctx); err == nil {
		tok = int64(cc.Token)
	}
	return s.write(ctx, g, r, c, func(exec func(ctx context.Context, sql string, args ...any) error) error {
		if err := s.upsert(ctx, exec, r, v, tok); err != nil {
			return err
		}
		if fail {
			return errInjected
		}
		return nil
	})
}

func (s *guardSubject) Write(ctx context.Context, r string, tok fence.Token, v string) error {
	c := fence.ClaimFor(ctx, tok)
	return s.do(ctx, r, &c, v, false)
}

func (s *guardSubject) WriteClaim(ctx context.Context, r string, c fence.Claim, v string) error {
	return s.do(ctx, r, &c, v, false)
}

func (s *guardSubject) WriteContext(ctx context.Context, r, v string) error {
	return s.do(ctx, r, nil, v, false)
}

func (s *guardSubject) WriteStrict(ctx context.Context, r string, c fence.Claim, v string) error {
	return s.doWith(ctx, s.take(s.stricts), r, &c, v, false)
}

func (s *guardSubject) WriteFailing(ctx context.Context, r string, tok fence.Token) error {
	c := fence.ClaimFor(ctx, tok)
	return s.do(ctx, r, &c, "failing", true)
}

func (s *guardSubject) Read(ctx context.Context, r string) (string, fence.Token, bool, error) {
	var v string
	var tok int64
	err := s.read.QueryRow(ctx, fmt.Sprintf(`SELECT value, token FROM %q.guarded WHERE resource = $1`, s.schema), r).Scan(&v, &tok)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0, false, nil
	}
	return v, fence.Token(tok), err == nil, err
}

var (
	_ guardtest.ClaimWriter   = (*guardSubject)(nil)
	_ guardtest.ContextWriter = (*guardSubject)(nil)
	_ guardtest.FailingWriter = (*guardSubject)(nil)
	_ guardtest.StrictWriter  = (*guardSubject)(nil)
	_ guardtest.OutcomeWriter = (*guardSubject)(nil)
)

func guardSchema(t *testing.T) string {
	schema := fencetest.Schema(t, migrations.Guard)
	_, err := fencetest.Pool(t).Exec(context.Background(), fmt.Sprintf(
		`CREATE TABLE %q.guarded (resource text PRIMARY KEY, value text NOT NULL, token bigint NOT NULL)`, schema))
	require.NoError(t, err)
	return schema
}

// TestGuardConformanceThroughPgBouncer runs the guard conformance kit on
// pgguard through PgBouncer in session and transaction pooling, with pgx
// pools (InTx, one batch per fence) and with database/sql (InSQLTx), in the
// exec modes each pooling mode allows.
func TestGuardConformanceThroughPgBouncer(t *testing.T) {
	cases := []struct {
		pool string
		exec pgx.QueryExecMode
	}{
		{fencetest.PgBouncerSession, pgx.QueryExecModeCacheStatement},
		{fencetest.PgBouncerTransaction, pgx.QueryExecModeExec},
		{fencetest.PgBouncerTransaction, pgx.QueryExecModeSimpleProtocol},
	}
	for _, c := range cases {
		t.Run(c.pool+"/"+fencetest.ExecModeName(c.exec), func(t *testing.T) {
			url := fencetest.PgBouncer(t, c.pool)
			schema := guardSchema(t)
			// guards returns a guard and a strict guard over the
			// same database for each of the configs.
			guards := func(cfgs []pgguard.Config) (gs, stricts []*pgguard.Guard) {
				for _, cfg := range cfgs {
					cfg.Schema = schema
					g, err := pgguard.New(cfg)
					require.NoError(t, err)
					cfg.Strict = true
					strict, err := pgguard.New(cfg)
					require.NoError(t, err)
					gs, stricts = append(gs, g), append(stricts, strict)
				}
				return gs, stricts
			}
			read := fencetest.PoolAt(t, url, c.exec)

			t.Run("pgx", func(t *testing.T) {
				var cfgs []pgguard.Config
				for range 3 {
					cfgs = append(cfgs, pgguard.Config{DB: fencetest.PoolAt(t, url, c.exec)})
				}
				p, hcfg := newHeldProxy(t, url)
				cfgs = append(cfgs, pgguard.Config{DB: fencetest.PoolFor(t, hcfg)})
				gs, stricts := guards(cfgs)
				held := &heldGuard{p: p, g: gs[len(gs)-1]}
				gs, stricts = gs[:len(gs)-1], stricts[:len(stricts)-1]
				s := &guardSubject{gs: gs, stricts: stricts, schema: schema, read: read, held: held,
					write: func(ctx context.Context, g *pgguard.Guard, r string, cl *fence.Claim, fn func(func(context.Context, string, ...any) error) error) error {
						body := func(ctx context.Context, tx pgx.Tx) error {
							return fn(func(ctx context.Context, q string, args ...any) error { _, err := tx.Exec(ctx, q, args...); return err })
						}
						if cl == nil {
							return g.InTx(ctx, r, body)
						}
						return g.InTx(fence.WithClaim(ctx, *cl), r, body)
					}}
				guardtest.Run(t, guardtest.Config{New: func(*testing.T) guardtest.Subject { return s }})
			})
			t.Run("database-sql", func(t *testing.T) {
				dsn, err := fencetest.URLWithExecMode(url, c.exec)
				require.NoError(t, err)
				var cfgs []pgguard.Config
				for range 3 {
					db, err := sql.Open("pgx", dsn)
					require.NoError(t, err)
					t.Cleanup(func() { _ = db.Close() })
					cfgs = append(cfgs, pgguard.Config{SQLDB: db})
				}
				p, hcfg := newHeldProxy(t, url)
				hdb := stdlib.OpenDB(*hcfg.ConnConfig)
				hdb.SetMaxOpenConns(1)
				t.Cleanup(func() { _ = hdb.Close() })
				cfgs = append(cfgs, pgguard.Config{SQLDB: hdb})
				gs, stricts := guards(cfgs)
				held := &heldGuard{p: p, g: gs[len(gs)-1]}
				gs, stricts = gs[:len(gs)-1], stricts[:len(stricts)-1]
				s := &guardSubject{gs: gs, stricts: stricts, schema: schema, read: read, held: held,
					write: func(ctx context.Context, g *pgguard.Guard, r string, cl *fence.Claim, fn func(func(context.Context, string, ...any) error) error) error {
						body := func(ctx context.Context, tx *sql.Tx) error {
							return fn(func(ctx context.Context, q string, args ...any) error {
								_, err := tx.ExecContext(ctx, q, args...)
								return err
							})
						}
						if cl == nil {
							return g.InSQLTx(ctx, r, body)
						}
						return g.InSQLTx(fence.WithClaim(ctx, *cl), r, body)
					}}
				guardtest.Run(t, guardtest.Config{New: func(*testing.T) guardtest.Subject { return s }, Prefix: "sql/"})
			})
		})
	}
}
