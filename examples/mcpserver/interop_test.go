package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/sql/migrations"
)

// The npm packages of interop/ (pinned in interop/package-lock.json) are
// installed once per test binary, by the first test that needs them.
var (
	npmOnce sync.Once
	npmErr  error
)

// nodeDeps makes sure node and npm exist (a missing one fails the test
// under CI=true) and that interop/node_modules matches the lockfile
// (npm ci, once per test binary). A failed install fails every test that
// needs it.
func nodeDeps(t *testing.T) {
	t.Helper()
	fencetest.SkipShort(t)
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			fencetest.Missing(t, "%s is not installed: %v", tool, err)
		}
	}
	npmOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		install := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
		install.Dir = "interop"
		if out, err := install.CombinedOutput(); err != nil {
			npmErr = fmt.Errorf("npm ci: %w\n%s", err, out)
		}
	})
	if npmErr != nil {
		t.Fatal(npmErr)
	}
}

// runNode runs an interop script (node <args...> in interop/) and fails the
// test, with the script's output, when it exits non-zero.
func runNode(ctx context.Context, t *testing.T, args ...string) string {
	t.Helper()
	node := exec.CommandContext(ctx, "node", args...)
	node.Dir = "interop"
	out, err := node.CombinedOutput()
	t.Logf("node %s:\n%s", strings.Join(args, " "), out)
	if err != nil {
		t.Fatalf("node %s failed: %v", args[0], err)
	}
	return string(out)
}

// TestTypeScriptInterop has a client nobody here wrote, the official
// TypeScript SDK (@modelcontextprotocol/sdk, pinned in
// interop/package-lock.json and installed here with npm ci), drive the
// two-devices scenario against the Go server over streamable HTTP
// (interop/scenario.mjs). Node 20 and npm are required under CI=true.
func TestTypeScriptInterop(t *testing.T) {
	nodeDeps(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

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
	runNode(ctx, t, "scenario.mjs", srv.URL+"/mcp", conv)
	want := map[string]int{"ts draft": 1, "ts final": 1, "ts last": 1}
	if b := bodies(t, e, conv); fmt.Sprint(b) != fmt.Sprint(want) {
		t.Errorf("stored notes %v, want %v", b, want)
	}
}
