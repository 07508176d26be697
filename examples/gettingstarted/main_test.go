package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/sql/migrations"
)

// TestGettingStarted runs the program against the test database, in a
// private schema.
func TestGettingStarted(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	schema := fencetest.Schema(t, migrations.Lease, migrations.Guard)
	var out bytes.Buffer
	if err := run(context.Background(), fencetest.DatabaseURL(), schema, &out); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !bytes.HasPrefix([]byte(got), []byte("written under token ")) {
		t.Fatalf("program printed %q", got)
	}
}
