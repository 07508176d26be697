package pgguard_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/pgguard"
)

// FenceTx inside a transaction the caller owns: the report row and the mark
// commit together, or not at all.
func ExampleGuard_FenceTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	g, err := pgguard.New(pgguard.Config{Schema: "app"})
	if err != nil {
		panic(err)
	}
	token, _ := fence.FromContext(ctx) // the token of the lease the caller holds

	tx, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := g.FenceTx(ctx, tx, "report/42", token); err != nil {
		if se, ok := fence.IsStale(err); ok {
			fmt.Println("a newer run owns report/42 now:", se.Highest)
		}
		return // FenceTx has rolled tx back
	}
	if _, err := tx.Exec(ctx, `UPDATE app.reports SET body = $1 WHERE id = 42`, "…"); err != nil {
		panic(err)
	}
	if err := tx.Commit(ctx); err != nil {
		panic(err)
	}
}

// Guard.Fence opens the transaction itself; write finds it in ctx.
func ExampleGuard_Fence() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	g, err := pgguard.New(pgguard.Config{DB: pool, Schema: "app"})
	if err != nil {
		panic(err)
	}
	err = g.Fence(ctx, "report/42", 8, func(ctx context.Context) error {
		tx, _ := pgguard.TxFromContext(ctx)
		_, err := tx.Exec(ctx, `UPDATE app.reports SET body = $1 WHERE id = 42`, "…")
		return err
	})
	fmt.Println(err)
}
