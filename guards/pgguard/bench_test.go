package pgguard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/internal/testsvc"
)

// BenchmarkWriteTx measures one transaction that upserts one row, without
// and with FenceTx, on the same pool and table in the same run. The ratio
// guarded/unguarded is the cost of fencing a PostgreSQL write.
func BenchmarkWriteTx(b *testing.B) {
	schema := setupSchema(b)
	pool := testsvc.Pool(b)
	g := newGuard(b, pgguard.Config{Schema: schema})
	upsert := upsertSQL(schema)
	ctx := context.Background()
	// One increasing counter for every sub-benchmark and repetition, so each
	// resource only ever sees higher tokens (-count > 1 reruns the closures).
	var next fence.Token
	run := func(b *testing.B, resource string, guarded bool) {
		for b.Loop() {
			next++
			tok := next
			tx, err := pool.Begin(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if guarded {
				if err := g.FenceTxClaim(ctx, tx, resource, cl(tok)); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := tx.Exec(ctx, upsert, resource, "value", int64(tok)); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("unguarded", func(b *testing.B) { run(b, "bench-unguarded", false) })
	b.Run("guarded", func(b *testing.B) { run(b, "bench-guarded", true) })
	// Both variants alternating in one loop, so load changes on a shared
	// machine hit them equally; reports each one's mean and the ratio.
	b.Run("interleaved", func(b *testing.B) {
		var spent [2]time.Duration
		var n [2]int
		i := 0
		for b.Loop() {
			guarded := i%2 == 1
			i++
			next++
			tok := next
			start := time.Now()
			tx, err := pool.Begin(ctx)
			if err != nil {
				b.Fatal(err)
			}
			resource := "bench-interleaved-unguarded"
			if guarded {
				resource = "bench-interleaved-guarded"
				if err := g.FenceTxClaim(ctx, tx, resource, cl(tok)); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := tx.Exec(ctx, upsert, resource, "value", int64(tok)); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				b.Fatal(err)
			}
			k := 0
			if guarded {
				k = 1
			}
			spent[k] += time.Since(start)
			n[k]++
		}
		if n[0] > 0 && n[1] > 0 {
			u := float64(spent[0].Nanoseconds()) / float64(n[0])
			gu := float64(spent[1].Nanoseconds()) / float64(n[1])
			b.ReportMetric(u, "unguarded-ns/op")
			b.ReportMetric(gu, "guarded-ns/op")
			b.ReportMetric(gu/u, "guarded/unguarded")
		}
	})
	// BEGIN+write+COMMIT against BeginFenced (BEGIN and fence in one
	// round trip)+write+COMMIT, alternating in one loop.
	b.Run("interleaved-beginfenced", func(b *testing.B) {
		var spent [2]time.Duration
		var n [2]int
		i := 0
		for b.Loop() {
			k := i % 2
			i++
			next++
			tok := next
			start := time.Now()
			var tx pgx.Tx
			var err error
			resource := "bench-bf-unguarded"
			if k == 1 {
				resource = "bench-bf-guarded"
				tx, err = g.BeginClaim(ctx, pool, resource, cl(tok))
			} else {
				tx, err = pool.Begin(ctx)
			}
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tx.Exec(ctx, upsert, resource, "value", int64(tok)); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				b.Fatal(err)
			}
			spent[k] += time.Since(start)
			n[k]++
		}
		if n[0] > 0 && n[1] > 0 {
			u := float64(spent[0].Nanoseconds()) / float64(n[0])
			gu := float64(spent[1].Nanoseconds()) / float64(n[1])
			b.ReportMetric(u, "unguarded-ns/op")
			b.ReportMetric(gu, "guarded-ns/op")
			b.ReportMetric(gu/u, "guarded/unguarded")
		}
	})
	// Guard.Fence, which also begins and commits for the caller; with the
	// default lock timeout (SET LOCAL sent with BEGIN) and without.
	for _, bc := range []struct {
		name    string
		timeout time.Duration
	}{{"guard.Fence", 0}, {"guard.Fence/no-lock-timeout", -1}} {
		gd := newGuard(b, pgguard.Config{Schema: schema, DB: pool, LockTimeout: bc.timeout})
		b.Run(bc.name, func(b *testing.B) {
			resource := "bench-" + bc.name
			for b.Loop() {
				next++
				tok := next
				err := gd.Fence(ctx, resource, tok, func(ctx context.Context) error {
					tx, ok := pgguard.TxFromContext(ctx)
					if !ok {
						return errors.New("no tx")
					}
					_, err := tx.Exec(ctx, upsert, resource, "value", int64(tok))
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
