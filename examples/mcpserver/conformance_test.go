package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/sql/migrations"
)

// conformanceScenarios are the server scenarios of the MCP conformance suite
// (@modelcontextprotocol/conformance, pinned in interop/package-lock.json)
// run against the notes server, per protocol revision: those of the
// revision's requirement set (the suite's requirements/<revision>.yaml) that
// apply to a server with tools only.
//
// Excluded, as the notes server has no such feature:
//   - every tools-call-* scenario, completion-complete, elicitation-*,
//     json-schema-2020-12, the input-required-result-* and tasks-* scenarios:
//     they call the suite's own test tools (test_simple_text,
//     test_image_content, test_tool_with_progress, test_sampling,
//     test_elicitation, test_complete, ...), which a notes server does not
//     have. Two of them (tools-call-simple-text, tools-call-error) pass
//     against it only because the Fence refuses the unknown tool as a
//     fenced call without a conversation (no_key), an error result with a
//     text content; such a pass proves nothing and is not counted.
//   - resources-*, prompts-*, sep-2164-resource-not-found: no resources or
//     prompts (resources-list and prompts-list pass with empty lists, which
//     proves nothing either).
//   - server-sse-polling (pending in the suite) and the SEP-2640 skills
//     extension.
var conformanceScenarios = map[string][]string{
	"2025-11-25": {
		"server-initialize",
		"server-session-lifecycle",
		"logging-set-level",
		"ping",
		"tools-list",
		"server-sse-multiple-streams",
		"dns-rebinding-protection",
	},
	"2026-07-28": {
		"server-stateless",
		"tools-list",
		"server-sse-multiple-streams",
		"dns-rebinding-protection",
		"caching",
	},
}

// check is one entry of a scenario's checks.json.
type check struct {
	ID           string `json:"id"`
	Status       string `json:"status"` // SUCCESS, FAILURE, WARNING, INFO, SKIPPED
	ErrorMessage string `json:"errorMessage"`
}

// TestConformance runs the MCP conformance suite's server scenarios that
// apply to the notes server (conformanceScenarios) against it over
// streamable HTTP, each at its revision's wire version (2025-11-25: the
// initialize handshake and sessions; 2026-07-28: stateless, per-request
// _meta). A scenario fails the test when the suite's CLI exits non-zero or
// any of its checks failed; one that ran no check fails too. The suite's
// client sends no bearer token: the test's handler adds alice's to requests
// without one (the example's auth is a stand-in, not under test).
func TestConformance(t *testing.T) {
	nodeDeps(t)
	e := &env{schema: fencetest.Schema(t, migrations.Lease, migrations.Guard), dir: t.TempDir(), pool: fencetest.Pool(t)}
	notes, err := NewNotes(t.Context(), e.pool, Options{Schema: e.schema, Dir: e.dir,
		Members: map[string][]string{"alice": {"acme"}}})
	if err != nil {
		t.Fatal(err)
	}
	h := notes.HTTPHandler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" {
			r.Header.Set("Authorization", "Bearer alice")
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.Close()
		if err := notes.Close(); err != nil {
			t.Error(err)
		}
	})

	for _, rev := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(rev, func(t *testing.T) {
			for _, sc := range conformanceScenarios[rev] {
				t.Run(sc, func(t *testing.T) {
					checks := conformanceRun(t, srv.URL+"/mcp", rev, sc)
					passed := 0
					for _, c := range checks {
						switch c.Status {
						case "SUCCESS":
							passed++
						case "FAILURE":
							t.Errorf("%s: %s", c.ID, c.ErrorMessage)
						case "WARNING":
							t.Logf("warning %s: %s", c.ID, c.ErrorMessage)
						}
					}
					if passed == 0 {
						t.Errorf("scenario %s at %s passed no check (%d checks)", sc, rev, len(checks))
					}
				})
			}
		})
	}
}

// conformanceRun runs one server scenario of the conformance CLI at
// revision rev against url and returns its checks. On Node 20 the CLI is
// loaded with interop/node20.mjs (it imports fs.globSync, Node 22's).
func conformanceRun(t *testing.T, url, rev, scenario string) []check {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out := t.TempDir()
	cmd := exec.CommandContext(ctx, "node", "--import", "./node20.mjs", "node_modules/@modelcontextprotocol/conformance/dist/index.js",
		"server", "--url", url, "--scenario", scenario, "--spec-version", rev, "--timeout", "20000", "-o", out)
	cmd.Dir = "interop"
	cmd.Env = append(os.Environ(), "NO_COLOR=1")
	stdout, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("conformance %s --spec-version %s: %v\n%s", scenario, rev, err, stdout)
	}
	files, _ := filepath.Glob(filepath.Join(out, "server-"+scenario+"-*", "checks.json"))
	if len(files) != 1 {
		t.Fatalf("conformance %s --spec-version %s wrote %d checks.json (the scenario did not run?)\n%s", scenario, rev, len(files), stdout)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var checks []check
	if err := json.Unmarshal(b, &checks); err != nil {
		t.Fatalf("%s: %v", files[0], err)
	}
	if t.Failed() {
		var ids []string
		for _, c := range checks {
			ids = append(ids, c.ID+"="+c.Status)
		}
		t.Logf("checks: %s", strings.Join(ids, " "))
	}
	return checks
}
