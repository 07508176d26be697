package pgguard_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/sql/migrations"
)

// exampleDB connects to TEST_DATABASE_URL (default: the local test
// database), creates a private schema with the guard's migrations and a
// reports table, and returns the pool, the schema and a cleanup function.
func exampleDB(ctx context.Context) (*pgxpool.Pool, string, func()) {
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/test"
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "pgguard_example_" + hex.EncodeToString(b[:])
	if _, err := migrations.Migrate(ctx, pool, migrations.Options{Schema: schema}, migrations.Guard); err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE `+schema+`.reports (
		id bigint PRIMARY KEY, body text NOT NULL, fence_token bigint NOT NULL, fence_run text NOT NULL DEFAULT '')`); err != nil {
		panic(err)
	}
	return pool, schema, func() {
		_ = migrations.DropSchema(ctx, pool, schema)
		pool.Close()
	}
}

// A tool call under a lease: the lease's context carries its claim (token
// and run identity), so the tool passes only ctx. Run B holds token 8; the
// late write of run A, which held token 7, is refused and changes nothing.
func ExampleGuard_InTx() {
	ctx := context.Background()
	pool, schema, cleanup := exampleDB(ctx)
	defer cleanup()
	g, err := pgguard.New(pgguard.Config{DB: pool, Schema: schema})
	if err != nil {
		panic(err)
	}
	writeReport := func(ctx context.Context, body string) error {
		return g.InTx(ctx, "report/42", func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO `+schema+`.reports (id, body, fence_token) VALUES (42, $1, 0)
				ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body`, body)
			return err
		})
	}
	// In a real program the contexts come from lease.Manager.Run.
	runB := fence.WithClaim(ctx, fence.Claim{Token: 8, Run: "run-b"})
	runA := fence.WithClaim(ctx, fence.Claim{Token: 7, Run: "run-a"})

	fmt.Println("run B:", writeReport(runB, "from B"))
	err = writeReport(runA, "from A")
	if se, ok := fence.IsStale(err); ok {
		fmt.Printf("run A refused: token %d, mark %d\n", se.Presented, se.Highest)
	}
	fmt.Println("no token:", writeReport(ctx, "from nowhere"))
	var body string
	if err := pool.QueryRow(ctx, `SELECT body FROM `+schema+`.reports WHERE id = 42`).Scan(&body); err != nil {
		panic(err)
	}
	fmt.Println("stored:", body)
	// Output:
	// run B: <nil>
	// run A refused: token 7, mark 8
	// no token: pgguard: "report/42": fence: no token in context
	// stored: from B
}

// FenceTx inside a transaction the caller opened: the caller's row and the
// mark commit together, or not at all. A refusal rolls the transaction
// back, including the row written before the check.
func ExampleGuard_FenceTx() {
	ctx := context.Background()
	pool, schema, cleanup := exampleDB(ctx)
	defer cleanup()
	g, err := pgguard.New(pgguard.Config{Schema: schema, DB: pool})
	if err != nil {
		panic(err)
	}
	write := func(ctx context.Context, body string) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := tx.Exec(ctx, `INSERT INTO `+schema+`.reports (id, body, fence_token) VALUES (7, $1, 0)
			ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body`, body); err != nil {
			return err
		}
		if err := g.FenceTx(ctx, tx, "report/7"); err != nil {
			return err // tx was rolled back
		}
		return tx.Commit(ctx)
	}
	fmt.Println(write(fence.WithToken(ctx, 12), "twelve"))
	err = write(fence.WithToken(ctx, 11), "eleven")
	fmt.Println(errors.Is(err, fence.ErrStale))
	mark, err := g.Mark(ctx, "report/7")
	fmt.Println(mark.Token, err)
	// Output:
	// <nil>
	// true
	// 12 <nil>
}

// database/sql (here with pgx's stdlib driver; any PostgreSQL driver
// works): InSQLTx begins, fences, runs the function and commits. A token
// from another source than a lease travels in ctx (fence.WithToken), as
// every claim does.
func ExampleGuard_InSQLTx_tokenFromElsewhere() {
	ctx := context.Background()
	pool, schema, cleanup := exampleDB(ctx)
	defer cleanup()
	db, err := sql.Open("pgx", pool.Config().ConnString())
	if err != nil {
		panic(err)
	}
	defer func() { _ = db.Close() }()
	g, err := pgguard.New(pgguard.Config{SQLDB: db, Schema: schema})
	if err != nil {
		panic(err)
	}
	write := func(token fence.Token, body string) error {
		return g.InSQLTx(fence.WithToken(ctx, token), "report/9", func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO `+schema+`.reports (id, body, fence_token) VALUES (9, $1, $2)
				ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body, fence_token = EXCLUDED.fence_token`, body, int64(token))
			return err
		})
	}
	fmt.Println(write(30, "thirty"))
	fmt.Println(write(29, "twenty-nine"))
	mark, err := g.Mark(ctx, "report/9") // on Config.SQLDB: this Guard has no pgx database
	fmt.Println(mark.Token, err)
	// Output:
	// <nil>
	// fence: stale token 29 for "report/9": resource has accepted 30
	// 30 <nil>
}

// In-row mode: the token lives in the reports row itself; each write is one
// conditional upsert, and a stale one changes nothing.
func ExampleRows_Upsert() {
	ctx := context.Background()
	pool, schema, cleanup := exampleDB(ctx)
	defer cleanup()
	reports, err := pgguard.NewRows(pgguard.RowsConfig{
		Schema: schema, Table: "reports", Key: []string{"id"}, Columns: []string{"body"},
		TokenColumn: "fence_token", RunColumn: "fence_run",
	})
	if err != nil {
		panic(err)
	}
	runB := fence.WithClaim(ctx, fence.Claim{Token: 8, Run: "run-b"})
	runA := fence.WithClaim(ctx, fence.Claim{Token: 7, Run: "run-a"})
	fmt.Println("run B:", reports.Upsert(runB, pool, []any{42}, "from B"))
	fmt.Println("run A:", reports.Upsert(runA, pool, []any{42}, "from A"))
	var body string
	var token int64
	if err := pool.QueryRow(ctx, `SELECT body, fence_token FROM `+schema+`.reports WHERE id = 42`).Scan(&body, &token); err != nil {
		panic(err)
	}
	fmt.Println("stored:", body, token)
	// Output:
	// run B: <nil>
	// run A: fence: stale token 7 for "42": resource has accepted 8
	// stored: from B 8
}
