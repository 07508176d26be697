package main

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"
)

// TestRun runs the example against TEST_DATABASE_URL and checks its story.
// Without a database it fails under CI=true and skips otherwise.
func TestRun(t *testing.T) {
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("TEST_DATABASE_URL is not set (required under CI=true)")
		}
		t.Skip("TEST_DATABASE_URL is not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, url, &out); err != nil {
		t.Fatal(err)
	}
	want := `run A writes: accepted
run B writes: accepted
run A, late: refused, token 7 is below the mark 8
no token: refused, no token in context
stored: final by B
`
	if out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}
