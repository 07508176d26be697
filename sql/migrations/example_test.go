package migrations_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/sql/migrations"
)

// Status before and after Migrate, and Down of one version.
func ExampleStatus() {
	ctx := context.Background()
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/test"
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	opts := migrations.Options{Schema: "example_status"}
	defer func() { _ = migrations.DropSchema(ctx, pool, opts.Schema) }()
	_ = migrations.DropSchema(ctx, pool, opts.Schema)

	embedded, err := migrations.Migrations(migrations.Lease)
	if err != nil {
		log.Fatal(err)
	}
	show := func() {
		st, err := migrations.Status(ctx, pool, opts, migrations.Lease)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("at the latest version: %v, all pending: %v\n",
			st[0].Current() == embedded[len(embedded)-1].Version, len(st[0].Pending) == len(embedded))
	}
	show()
	if _, err := migrations.Migrate(ctx, pool, opts, migrations.Lease); err != nil {
		log.Fatal(err)
	}
	show()
	reverted, err := migrations.Down(ctx, pool, opts, migrations.Lease, 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("reverted all:", len(reverted) > 0)
	show()
	// Output:
	// at the latest version: false, all pending: true
	// at the latest version: true, all pending: false
	// reverted all: true
	// at the latest version: false, all pending: true
}
