package pgguard_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/guards/pgguard"
)

// interleave runs the unguarded and the guarded variant alternately, one of
// each per iteration, so load changes on a shared machine hit both alike,
// and reports each one's mean and the ratio guarded/unguarded. Each call
// gets a token higher than every earlier one (benchToken).
func interleave(b *testing.B, unguarded, guarded func(tok fence.Token) error) {
	b.Helper()
	fs := [2]func(fence.Token) error{unguarded, guarded}
	var spent [2]time.Duration
	n := 0
	for b.Loop() {
		order := [2]int{0, 1}
		if n%2 == 1 { // alternate which one goes first
			order = [2]int{1, 0}
		}
		for _, k := range order {
			benchToken++
			start := time.Now()
			if err := fs[k](benchToken); err != nil {
				b.Fatal(err)
			}
			spent[k] += time.Since(start)
		}
		n++
	}
	if n > 0 {
		u := float64(spent[0].Nanoseconds()) / float64(n)
		g := float64(spent[1].Nanoseconds()) / float64(n)
		b.ReportMetric(u, "unguarded-ns/op")
		b.ReportMetric(g, "guarded-ns/op")
		b.ReportMetric(g/u, "guarded/unguarded")
	}
}

// benchToken only grows, across sub-benchmarks and -count repetitions, so
// every resource only ever sees higher tokens.
var benchToken fence.Token

// BenchmarkWriteTx measures a guarded write against the same unguarded
// write, interleaved in one loop, on one connection of one pool, for each
// entry point: marks mode (InTx: BEGIN and fence in one batch; FenceTx in
// the caller's transaction; InTx without a lock bound) and in-row mode (one
// conditional upsert outside a transaction), through pgx and database/sql.
func BenchmarkWriteTx(b *testing.B) {
	schema := setupSchema(b)
	_, err := fencetest.Pool(b).Exec(bg(), fmt.Sprintf(`CREATE TABLE %q.docs (
		resource text PRIMARY KEY, value text NOT NULL,
		fence_token bigint NOT NULL, fence_run text NOT NULL DEFAULT '')`, schema))
	if err != nil {
		b.Fatal(err)
	}
	pool := fencetest.PoolWith(b, fencetest.DatabaseURL(), func(cfg *pgxpool.Config) { cfg.MaxConns = 1 })
	db := sqlDB(b)
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	g := newGuard(b, pgguard.Config{Schema: schema, DB: pool, SQLDB: db})
	gNoBound := newGuard(b, pgguard.Config{Schema: schema, DB: pool, LockTimeout: -1})
	rows := newRows(b, schema, nil)
	upsert := upsertSQL(schema)
	docUpsert := fmt.Sprintf(`INSERT INTO %q.docs (resource, value, fence_token) VALUES ($1, $2, $3)
ON CONFLICT (resource) DO UPDATE SET value = EXCLUDED.value, fence_token = EXCLUDED.fence_token`, schema)

	plainTx := func(r string) func(fence.Token) error {
		return func(tok fence.Token) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, upsert, r, "value", int64(tok))
				return err
			})
		}
	}
	inTx := func(g *pgguard.Guard, r string) func(fence.Token) error {
		return func(tok fence.Token) error {
			return g.InTx(fence.WithClaim(ctx, cl(tok)), r, func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, upsert, r, "value", int64(tok))
				return err
			})
		}
	}
	b.Run("pgx/marks/InTx", func(b *testing.B) {
		interleave(b, plainTx("u-intx"), inTx(g, "g-intx"))
	})
	b.Run("pgx/marks/InTx-no-lock-bound", func(b *testing.B) {
		interleave(b, plainTx("u-intx-nb"), inTx(gNoBound, "g-intx-nb"))
	})
	b.Run("pgx/marks/FenceTx", func(b *testing.B) {
		interleave(b, plainTx("u-fencetx"), func(tok fence.Token) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if err := g.FenceTx(fence.WithClaim(ctx, cl(tok)), tx, "g-fencetx"); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, upsert, "g-fencetx", "value", int64(tok))
				return err
			})
		})
	})
	b.Run("pgx/rows/Upsert", func(b *testing.B) {
		interleave(b, func(tok fence.Token) error {
			_, err := pool.Exec(ctx, docUpsert, "u-rows", "value", int64(tok))
			return err
		}, func(tok fence.Token) error {
			return rows.Upsert(fence.WithClaim(ctx, cl(tok)), pool, []any{"g-rows"}, "value")
		})
	})

	plainSQLTx := func(r string) func(fence.Token) error {
		return func(tok fence.Token) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback() }()
			if _, err := tx.ExecContext(ctx, upsert, r, "value", int64(tok)); err != nil {
				return err
			}
			return tx.Commit()
		}
	}
	b.Run("sql/marks/InSQLTx", func(b *testing.B) {
		interleave(b, plainSQLTx("su-intx"), func(tok fence.Token) error {
			return g.InSQLTx(fence.WithClaim(ctx, cl(tok)), "sg-intx", func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, upsert, "sg-intx", "value", int64(tok))
				return err
			})
		})
	})
	b.Run("sql/rows/UpsertSQL", func(b *testing.B) {
		interleave(b, func(tok fence.Token) error {
			_, err := db.ExecContext(ctx, docUpsert, "su-rows", "value", int64(tok))
			return err
		}, func(tok fence.Token) error {
			return rows.UpsertSQL(fence.WithClaim(ctx, cl(tok)), db, []any{"sg-rows"}, "value")
		})
	})
}
