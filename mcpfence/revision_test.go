package mcpfence_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/mcpfence"
)

// TestRefusalCompleteOnNewRevision: a refusal the Fence builds carries
// resultType "complete" on 2026-07-28, as the revision's clients (the
// TypeScript v2 client) require of every result, like a tool's own result.
func TestRefusalCompleteOnNewRevision(t *testing.T) {
	h := newHarness(t, mcpfence.Config{}, lease.Config{})
	srv := httptest.NewServer(h.f.HTTPHandler(func(*http.Request) *mcp.Server { return h.server }, nil))
	defer srv.Close()
	for _, conv := range []string{"", `,"io.fencekit/conversation":"rt-1"`} {
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"write","arguments":{},"_meta":{` +
			`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"0"},` +
			`"io.modelcontextprotocol/clientCapabilities":{}` + conv + `}}}`
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", "write")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close() //nolint:errcheck,gosec // test
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"resultType":"complete"`) {
			t.Errorf("no resultType in %s", b)
		}
		if conv == "" && !strings.Contains(string(b), `"cause":"no_key"`) {
			t.Errorf("want a no_key refusal, got %s", b)
		}
	}
}
