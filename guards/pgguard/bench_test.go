package pgguard_test

import (
	"context"
	"errors"
	"testing"

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
	run := func(b *testing.B, resource string, guarded bool) {
		tok := fence.Token(0)
		for b.Loop() {
			tok++
			tx, err := pool.Begin(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if guarded {
				if err := g.FenceTx(ctx, tx, resource, tok); err != nil {
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
	// Guard.Fence, which also begins and commits for the caller.
	gd := newGuard(b, pgguard.Config{Schema: schema, DB: pool})
	b.Run("guard.Fence", func(b *testing.B) {
		tok := fence.Token(0)
		for b.Loop() {
			tok++
			err := gd.Fence(ctx, "bench-fence", tok, func(ctx context.Context) error {
				tx, ok := pgguard.TxFromContext(ctx)
				if !ok {
					return errors.New("no tx")
				}
				_, err := tx.Exec(ctx, upsert, "bench-fence", "value", int64(tok))
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}
