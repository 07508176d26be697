package main

import (
	"context"
	"net/http/httptest"
	"os/exec"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/sql/migrations"
)

// TestTypeScriptInterop has a client nobody here wrote, the official
// TypeScript SDK (@modelcontextprotocol/sdk, pinned in
// interop/package-lock.json and installed here with npm ci), drive the
// two-devices scenario against the Go server over streamable HTTP
// (interop/scenario.mjs). Node 20 and npm are required under CI=true.
func TestTypeScriptInterop(t *testing.T) {
	fencetest.SkipShort(t)
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			fencetest.Missing(t, "%s is not installed: %v", tool, err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	install := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
	install.Dir = "interop"
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("npm ci: %v\n%s", err, out)
	}

	e := &env{schema: fencetest.Schema(t, migrations.Lease, migrations.Guard), dir: t.TempDir(), pool: fencetest.Pool(t)}
	notes, err := NewNotes(ctx, e.pool, Options{Schema: e.schema, Dir: e.dir,
		Members: map[string][]string{"alice": {"acme"}, "mallory": {"other"}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(notes.HTTPHandler())
	defer func() {
		srv.Close()
		if err := notes.Close(); err != nil {
			t.Error(err)
		}
	}()

	conv := "ts-" + uuid.NewString()[:8]
	node := exec.CommandContext(ctx, "node", "scenario.mjs", srv.URL+"/mcp", conv)
	node.Dir = "interop"
	out, err := node.CombinedOutput()
	t.Logf("scenario.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("the TypeScript client's scenario failed: %v", err)
	}
	want := map[string]int{"ts draft": 1, "ts final": 1, "ts last": 1}
	if b := bodies(t, e, conv); len(b) != len(want) || b["ts draft"] != 1 || b["ts final"] != 1 || b["ts last"] != 1 {
		t.Errorf("stored notes %v, want %v", b, want)
	}
}
