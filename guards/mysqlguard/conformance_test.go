package mysqlguard

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardtest"
)

// marksSubject drives marks mode: the value and token are a row of the
// data table written in the fenced transaction. g's Config.DB is the pool
// it writes on; db is the pool Read reads on.
type marksSubject struct {
	f  fixture
	g  *Guard
	db *sql.DB
}

func (s marksSubject) WriteClaim(ctx context.Context, r string, c fence.Claim, v string) error {
	return s.g.InTx(fence.WithClaim(ctx, c), r, func(ctx context.Context, tx *sql.Tx) error {
		return s.f.writeData(ctx, tx, r, int64(c.Token), v)
	})
}

func (s marksSubject) Write(ctx context.Context, r string, tok fence.Token, v string) error {
	return s.WriteClaim(ctx, r, fence.Claim{Token: tok}, v)
}

func (s marksSubject) WriteContext(ctx context.Context, r, v string) error {
	return s.g.InTx(ctx, r, func(ctx context.Context, tx *sql.Tx) error {
		tok, _ := fence.FromContext(ctx)
		return s.f.writeData(ctx, tx, r, int64(tok), v)
	})
}

func (s marksSubject) WriteFailing(ctx context.Context, r string, tok fence.Token) error {
	return s.g.InTx(fence.WithClaim(ctx, fence.Claim{Token: tok}), r, func(ctx context.Context, tx *sql.Tx) error {
		if err := s.f.writeData(ctx, tx, r, int64(tok), "never"); err != nil {
			return err
		}
		return guardtest.ErrInjected
	})
}

// Guard is the guard the subject's writes go through (guardtest.Fencer).
func (s marksSubject) Guard() fence.Guard { return s.g }

func (s marksSubject) Read(ctx context.Context, r string) (string, fence.Token, bool, error) {
	v, tok, ok, err := s.f.readData(ctx, s.db, s.f.data, "token", r)
	return v, fence.Token(tok), ok, err
}

// fenceSubject drives marks mode through Fence (fence.Guard) on
// Config.DB.
type fenceSubject struct{ marksSubject }

func (s fenceSubject) WriteClaim(ctx context.Context, r string, c fence.Claim, v string) error {
	return s.g.Fence(fence.WithClaim(ctx, c), r, c.Token, func(ctx context.Context) error {
		tx, _ := TxFromContext(ctx)
		return s.f.writeData(ctx, tx, r, int64(c.Token), v)
	})
}

func (s fenceSubject) Write(ctx context.Context, r string, tok fence.Token, v string) error {
	return s.WriteClaim(ctx, r, fence.Claim{Token: tok}, v)
}

// rowsSubject drives in-row mode: one upsert of the user's row.
type rowsSubject struct {
	f  fixture
	r  *Rows
	db *sql.DB
}

func (s rowsSubject) WriteClaim(ctx context.Context, r string, c fence.Claim, v string) error {
	return s.r.Upsert(fence.WithClaim(ctx, c), s.db, []any{r}, v)
}

func (s rowsSubject) Write(ctx context.Context, r string, tok fence.Token, v string) error {
	return s.WriteClaim(ctx, r, fence.Claim{Token: tok}, v)
}

func (s rowsSubject) WriteContext(ctx context.Context, r, v string) error {
	return s.r.Upsert(ctx, s.db, []any{r}, v)
}

// WriteFailing upserts inside a transaction that the caller then abandons.
func (s rowsSubject) WriteFailing(ctx context.Context, r string, tok fence.Token) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer rollback(tx)
	if err := s.r.Upsert(fence.WithClaim(ctx, fence.Claim{Token: tok}), tx, []any{r}, "never"); err != nil {
		return err
	}
	return guardtest.ErrInjected
}

func (s rowsSubject) Read(ctx context.Context, r string) (string, fence.Token, bool, error) {
	v, tok, ok, err := s.f.readData(ctx, s.db, s.f.rows, "fence_token", r)
	return v, fence.Token(tok), ok, err
}

func TestConformance(t *testing.T) {
	for _, iso := range []struct {
		name  string
		level sql.IsolationLevel
	}{{"ReadCommitted", sql.LevelReadCommitted}, {"RepeatableRead", sql.LevelRepeatableRead}} {
		t.Run(iso.name, func(t *testing.T) {
			f := newFixture(t)
			guardtest.Run(t, guardtest.Config{
				// Every check gets its own pool.
				New: func(t *testing.T) guardtest.Subject {
					db := openDB(t, nil)
					return marksKit{
						marksSubject: marksSubject{f: f, g: f.guard(t, Config{DB: db, IsoLevel: iso.level}), db: db},
						t:            t,
						iso:          iso.level,
						strict:       f.guard(t, Config{DB: db, IsoLevel: iso.level, Strict: true}),
					}
				},
			})
		})
	}
}

func TestConformanceFence(t *testing.T) {
	f := newFixture(t)
	guardtest.Run(t, guardtest.Config{
		New: func(t *testing.T) guardtest.Subject {
			db := openDB(t, nil)
			return fenceKit{
				fenceSubject: fenceSubject{marksSubject{f: f, g: f.guard(t, Config{DB: db}), db: db}},
				t:            t,
				strict:       f.guard(t, Config{DB: db, Strict: true}),
			}
		},
		Rounds: 10,
	})
}

func TestConformanceInRow(t *testing.T) {
	f := newFixture(t)
	guardtest.Run(t, guardtest.Config{
		New: func(t *testing.T) guardtest.Subject {
			return rowsKit{
				rowsSubject: rowsSubject{f: f, r: f.inRow(t, RowsConfig{}), db: openDB(t, nil)},
				t:           t,
				strict:      f.inRow(t, RowsConfig{Strict: true}),
			}
		},
	})
}

// spread is a Subject whose calls go round-robin to Subjects on
// independent pools.
type spread struct {
	subs []guardtest.Subject
	n    atomic.Uint64
}

func (s *spread) next() guardtest.Subject { return s.subs[s.n.Add(1)%uint64(len(s.subs))] }

func (s *spread) Write(ctx context.Context, r string, tok fence.Token, v string) error {
	return s.next().Write(ctx, r, tok, v)
}

func (s *spread) Read(ctx context.Context, r string) (string, fence.Token, bool, error) {
	return s.next().Read(ctx, r)
}

// TestConcurrentIndependentClients runs the kit's history check with 8
// writers spread over 8 independent pools, for marks mode under both
// isolation levels and for in-row mode.
func TestConcurrentIndependentClients(t *testing.T) {
	for _, mode := range []string{"marks/ReadCommitted", "marks/RepeatableRead", "inrow"} {
		t.Run(mode, func(t *testing.T) {
			f := newFixture(t)
			sp := &spread{}
			for range 8 {
				db := openDB(t, nil)
				switch mode {
				case "inrow":
					sp.subs = append(sp.subs, rowsSubject{f: f, r: f.inRow(t, RowsConfig{}), db: db})
				case "marks/ReadCommitted":
					sp.subs = append(sp.subs, marksSubject{f: f, g: f.guard(t, Config{DB: db, IsoLevel: sql.LevelReadCommitted}), db: db})
				default:
					sp.subs = append(sp.subs, marksSubject{f: f, g: f.guard(t, Config{DB: db, IsoLevel: sql.LevelRepeatableRead}), db: db})
				}
			}
			cfg, err := guardtest.Config{Writers: 8, Rounds: 30, Logf: t.Logf}.WithDefaults()
			if err != nil {
				t.Fatal(err)
			}
			if err := guardtest.CheckConcurrent(context.Background(), sp, cfg); err != nil {
				t.Fatal(err)
			}
		})
	}
}
