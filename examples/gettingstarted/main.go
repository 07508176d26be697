// Command gettingstarted is the smallest fencekit program: PostgreSQL only.
// A tool call runs under a conversation's lease and writes a row through
// pgguard, which refuses the write if a newer run of the conversation has
// written first. docs/guide/getting-started.md walks through it.
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/test go run ./examples/gettingstarted
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

func main() {
	schema := os.Getenv("FENCEKIT_SCHEMA") // fencekit's tables and the example's own
	if schema == "" {
		schema = "gettingstarted"
	}
	if err := run(context.Background(), os.Getenv("DATABASE_URL"), schema, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, url, schema string, out io.Writer) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := setup(ctx, pool, schema); err != nil {
		return err
	}

	// --- the program -----------------------------------------------------
	m, err := lease.New(lease.Config{Pool: pool, Schema: schema}) // one Manager per process
	if err != nil {
		return err
	}
	defer m.Close() //nolint:contextcheck // Close releases under a fresh bounded context of its own
	guard, err := pgguard.New(pgguard.Config{DB: pool, Schema: schema})
	if err != nil {
		return err
	}
	key := lease.Key{AccountID: "acme", SessionID: "conversation-1"}        // a key is a conversation
	err = m.Run(ctx, key, func(ctx context.Context, l *lease.Lease) error { // acquire, work, release
		return guard.InTx(ctx, key.Resource("notes"), func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, "notes"}.Sanitize()+" (body) VALUES ($1)",
				fmt.Sprintf("written under token %d", l.Token()))
			return err
		})
	})
	// ----------------------------------------------------------------------
	if err != nil {
		return err
	}
	var body string
	if err := pool.QueryRow(ctx, "SELECT body FROM "+pgx.Identifier{schema, "notes"}.Sanitize()+
		" ORDER BY id DESC LIMIT 1").Scan(&body); err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, body)
	return err
}

// setup creates the schema, applies fencekit's migrations and the example's
// own table: what an application's deployment does once.
func setup(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	if _, err := migrations.Migrate(ctx, pool, migrations.Options{Schema: schema}, migrations.Lease, migrations.Guard); err != nil {
		return err
	}
	_, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+pgx.Identifier{schema, "notes"}.Sanitize()+
		" (id bigserial PRIMARY KEY, body text NOT NULL)")
	return err
}
