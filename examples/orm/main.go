// Command orm shows pgguard with an ORM (GORM over database/sql): a report
// row written in GORM's transaction is fenced by the same transaction, so a
// late write from a run that lost its lease is refused and changes nothing.
//
// It needs a PostgreSQL database: DATABASE_URL (default: the local test
// database). It creates a private schema and drops it on exit.
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/sql/migrations"
)

// Report is the guarded row.
type Report struct {
	ID   int64 `gorm:"primaryKey"`
	Body string
}

func main() {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/test"
	}
	if err := run(context.Background(), url, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "orm:", err)
		os.Exit(1)
	}
}

// writeReport saves the report in a GORM transaction fenced for
// "report/<id>" under the claim ctx carries (a lease's context carries one).
func writeReport(ctx context.Context, db *gorm.DB, g *pgguard.Guard, r Report) error {
	return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		sqlTx, ok := tx.Statement.ConnPool.(*sql.Tx)
		if !ok {
			return errors.New("GORM transaction is not a *sql.Tx")
		}
		if err := g.FenceSQLTx(ctx, sqlTx, fmt.Sprintf("report/%d", r.ID)); err != nil {
			return err // refused or failed: the transaction was rolled back
		}
		return tx.Save(&r).Error
	})
}

// run plays the story against the database at url and prints it to out.
func run(ctx context.Context, url string, out io.Writer) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "orm_example_" + hex.EncodeToString(b[:])
	if _, err := migrations.Migrate(ctx, pool, migrations.Options{Schema: schema}, migrations.Guard); err != nil {
		return err
	}
	defer func() { _ = migrations.DropSchema(context.WithoutCancel(ctx), pool, schema) }()

	db, err := gorm.Open(postgres.Open(url), &gorm.Config{
		Logger:         logger.Default.LogMode(logger.Silent),
		NamingStrategy: gormSchema(schema),
	})
	if err != nil {
		return err
	}
	sqlDB, err := db.DB() // the ORM's own *sql.DB: the guard reads marks on it
	if err != nil {
		return err
	}
	defer func() { _ = sqlDB.Close() }()
	if err := db.WithContext(ctx).AutoMigrate(&Report{}); err != nil {
		return err
	}
	g, err := pgguard.New(pgguard.Config{SQLDB: sqlDB, Schema: schema})
	if err != nil {
		return err
	}

	// In a real program these contexts come from lease.Manager.Run: run A
	// was granted token 7, then lost the lease to run B (token 8).
	runA := fence.WithClaim(ctx, fence.Claim{Token: 7, Run: "run-a"})
	runB := fence.WithClaim(ctx, fence.Claim{Token: 8, Run: "run-b"})

	fmt.Fprintln(out, "run A writes:", result(writeReport(runA, db, g, Report{ID: 1, Body: "draft by A"})))
	fmt.Fprintln(out, "run B writes:", result(writeReport(runB, db, g, Report{ID: 1, Body: "final by B"})))
	fmt.Fprintln(out, "run A, late:", result(writeReport(runA, db, g, Report{ID: 1, Body: "late by A"})))
	fmt.Fprintln(out, "no token:", result(writeReport(ctx, db, g, Report{ID: 1, Body: "unfenced"})))
	var got Report
	if err := db.WithContext(ctx).First(&got, 1).Error; err != nil {
		return err
	}
	fmt.Fprintln(out, "stored:", got.Body)
	return nil
}

func result(err error) string {
	if se, ok := fence.IsStale(err); ok {
		return fmt.Sprintf("refused, token %d is below the mark %d", se.Presented, se.Highest)
	}
	if errors.Is(err, fence.ErrNoToken) {
		return "refused, no token in context"
	}
	if err != nil {
		return "error: " + err.Error()
	}
	return "accepted"
}
