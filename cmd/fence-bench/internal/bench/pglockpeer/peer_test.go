package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"cirello.io/pglock"
)

func TestServeProtocol(t *testing.T) {
	in := strings.NewReader("run 1000\nrun x\nrun 5\nbogus\nquit\nrun 7\n")
	var out strings.Builder
	calls := 0
	err := serve(in, &out, func(d time.Duration) (int, time.Duration, error) {
		calls++
		if d == 5 {
			return 0, 0, errors.New("boom\nline two")
		}
		return 42, 3 * d, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "ok 42 3000\nerr bad duration \"x\"\nerr boom line two\nerr unknown command \"bogus\"\n"
	if out.String() != want {
		t.Fatalf("replies:\n%q\nwant\n%q", out.String(), want)
	}
	if calls != 2 {
		t.Fatalf("run called %d times, want 2 (nothing after quit)", calls)
	}
	if err := serve(strings.NewReader("run 1\n"), io.Discard, func(time.Duration) (int, time.Duration, error) { return 1, 1, nil }); err == nil {
		t.Fatal("end of input without quit must be an error")
	}
}

// TestCyclesAgainstPostgres runs real pglock cycles in a private schema,
// and checks that a name another client holds is refused (FailIfLocked).
func TestCyclesAgainstPostgres(t *testing.T) {
	dsn := os.Getenv("TEST_DATABASE_URL")
	if dsn == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("TEST_DATABASE_URL not set")
		}
		t.Skip("TEST_DATABASE_URL not set")
	}
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	schema := fmt.Sprintf("pglockpeer_test_%d", time.Now().UnixNano())
	if _, err := db.Exec(`CREATE SCHEMA ` + schema); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = db.Exec(`DROP SCHEMA ` + schema + ` CASCADE`) }()
	c, err := newCycler(db, schema+".locks", 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.client.CreateTable(); err != nil {
		t.Fatal(err)
	}
	n, el, err := c.cycles(context.Background(), 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 || el < 200*time.Millisecond {
		t.Fatalf("cycles = %d in %v", n, el)
	}
	var left int
	if err := db.QueryRow(`SELECT count(*) FROM ` + schema + `.locks`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d locks left after release (release deletes)", left)
	}
	other, err := pglock.New(db, pglock.WithCustomTable(schema+".locks"))
	if err != nil {
		t.Fatal(err)
	}
	held, err := other.Acquire("w0-0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Release(held) }()
	if _, _, err := c.cycles(context.Background(), 50*time.Millisecond); !errors.Is(err, pglock.ErrNotAcquired) {
		t.Fatalf("cycle on a held name: %v, want ErrNotAcquired", err)
	}
}
