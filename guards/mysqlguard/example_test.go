package mysqlguard_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"

	_ "github.com/go-sql-driver/mysql" // database/sql driver "mysql"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/mysqlguard"
)

// exampleDB opens TEST_MYSQL_DSN (default: root on 127.0.0.1:3306, database
// test) and returns it with a fresh table name suffix.
func exampleDB() (*sql.DB, string) {
	dsn := os.Getenv("TEST_MYSQL_DSN")
	if dsn == "" {
		dsn = "root@tcp(127.0.0.1:3306)/test"
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		panic(err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return db, hex.EncodeToString(b[:])
}

// Marks mode: the mark is checked and raised by one statement inside the
// transaction that writes the report, so both commit or neither does.
func ExampleGuard_InTx() {
	ctx := context.Background()
	db, suffix := exampleDB()
	defer func() { _ = db.Close() }()
	g, err := mysqlguard.New(mysqlguard.Config{DB: db, Table: "example_marks_" + suffix})
	if err != nil {
		panic(err)
	}
	if err := g.CreateTable(ctx); err != nil {
		panic(err)
	}
	reports := "example_reports_" + suffix
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+reports+" (id INT PRIMARY KEY, body TEXT NOT NULL)"); err != nil {
		panic(err)
	}
	defer db.ExecContext(ctx, "DROP TABLE "+reports+", "+g.Table())

	write := func(claim fence.Claim, body string) error {
		return g.InTx(fence.WithClaim(ctx, claim), "reports/1", func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "REPLACE INTO "+reports+" (id, body) VALUES (1, ?)", body)
			return err
		})
	}
	fmt.Println(write(fence.Claim{Token: 7, Run: "run-a"}, "draft from A"))
	fmt.Println(write(fence.Claim{Token: 8, Run: "run-b"}, "final from B"))
	err = write(fence.Claim{Token: 7, Run: "run-a"}, "late write from A")
	if se, ok := fence.IsStale(err); ok {
		fmt.Printf("A refused: token %d, resource has accepted %d\n", se.Presented, se.Highest)
	}
	var body string
	_ = db.QueryRowContext(ctx, "SELECT body FROM "+reports+" WHERE id = 1").Scan(&body)
	fmt.Println(body)
	// Output:
	// <nil>
	// <nil>
	// A refused: token 7, resource has accepted 8
	// final from B
}

// In-row mode: the row keeps its own token and run; one conditional
// upsert writes it, with no marks table.
func ExampleRows_Upsert() {
	ctx := context.Background()
	db, suffix := exampleDB()
	defer func() { _ = db.Close() }()
	docs := "example_docs_" + suffix
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+docs+` (
		id VARBINARY(64) PRIMARY KEY, body TEXT NOT NULL,
		fence_token BIGINT NOT NULL, fence_run VARBINARY(64) NOT NULL DEFAULT '')`); err != nil {
		panic(err)
	}
	defer db.ExecContext(ctx, "DROP TABLE "+docs)
	rows, err := mysqlguard.NewRows(mysqlguard.RowsConfig{
		Table: docs, Key: []string{"id"}, Columns: []string{"body"}, RunColumn: "fence_run",
	})
	if err != nil {
		panic(err)
	}
	runB := fence.WithClaim(ctx, fence.Claim{Token: 8, Run: "run-b"})
	fmt.Println(rows.Upsert(runB, db, []any{"doc-1"}, "from B"))
	// The same token from another run: issued twice, refused.
	err = rows.Upsert(fence.WithClaim(ctx, fence.Claim{Token: 8, Run: "run-c"}), db, []any{"doc-1"}, "from C")
	if re, ok := fence.IsReused(err); ok {
		fmt.Printf("C refused: token %d was accepted from %s\n", re.Token, re.MarkRun)
	}
	// Output:
	// <nil>
	// C refused: token 8 was accepted from run-b
}
