package mcpfence_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/mcpfence"
)

// rawStatelessCall posts one 2026-07-28 tools/call of tool "write" with
// {"hold": true} for conv, as a client that never sends
// notifications/cancelled would, and returns when ctx ends the request.
func rawStatelessCall(ctx context.Context, url, conv string) error {
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"write","arguments":{"hold":true},"_meta":{` +
		`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"0"},` +
		`"io.modelcontextprotocol/clientCapabilities":{},"` + mcpfence.MetaConversation + `":"` + conv + `"}}}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", mcpfence.Revision20260728)
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", "write")
	req.Header.Set("Fencekit-Mcp-Call", "spoofed") // HTTPHandler replaces it
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close() //nolint:errcheck // test
	if resp.StatusCode != http.StatusOK {
		return errors.New("status " + resp.Status)
	}
	buf := make([]byte, 4096)
	for {
		if _, err := resp.Body.Read(buf); err != nil {
			return err
		}
	}
}

// TestClientGoneEndsCall: a call whose client is gone ends and releases its
// per-call lease within 1 s, with no notifications/cancelled: on
// 2026-07-28 when its HTTP request is dropped, on 2025-11-25 when the client
// closes its MCP session (DELETE).
func TestClientGoneEndsCall(t *testing.T) {
	h := newHarness(t, mcpfence.Config{}, lease.Config{})
	srv := httptest.NewServer(h.f.HTTPHandler(func(*http.Request) *mcp.Server { return h.server }, nil))
	defer srv.Close()
	key := func(conv string) lease.Key { return lease.Key{AccountID: "acme", SessionID: conv} }
	// released polls the key's row (Inspect, a statement each 10 ms) until
	// it is released, at most within of the client's leaving.
	released := func(k lease.Key, left time.Time, within time.Duration) {
		t.Helper()
		for {
			o, err := h.m.Inspect(t.Context(), k)
			if err == nil && o.State == lease.StateReleased {
				t.Logf("released %s after the client left", time.Since(left).Round(time.Millisecond))
				return
			}
			if time.Since(left) > within {
				t.Fatalf("%s not released within %s of the client leaving: %+v %v", k, within, o, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitHeld := func(k lease.Key) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			o, err := h.m.Inspect(t.Context(), k)
			if err == nil && o.State == lease.StateHeld {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never held: %+v %v", k, o, err)
			}
		}
	}

	t.Run("dropped request 2026-07-28", func(t *testing.T) {
		conv := "gone-" + uuid.NewString()[:8]
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- rawStatelessCall(ctx, srv.URL, conv) }()
		waitHeld(key(conv))
		left := time.Now()
		cancel() // the connection drops
		<-done
		released(key(conv), left, time.Second)
	})

	t.Run("session closed 2025-11-25", func(t *testing.T) {
		conv := "gone-" + uuid.NewString()[:8]
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "old", Version: "v0"}, nil).Connect(t.Context(),
			&mcp.StreamableClientTransport{Endpoint: srv.URL}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := call(context.WithoutCancel(t.Context()), cs, "write", conv, "", false, map[string]any{"hold": true})
			done <- err
		}()
		waitHeld(key(conv))
		// The session's DELETE, as a client that leaves sends it (the Go
		// SDK's own Close waits for its calls first).
		del, err := http.NewRequestWithContext(t.Context(), http.MethodDelete, srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		del.Header.Set("Mcp-Session-Id", cs.ID())
		closed := make(chan error, 1)
		left := time.Now()
		go func() {
			resp, err := http.DefaultClient.Do(del)
			if err == nil {
				resp.Body.Close() //nolint:errcheck,gosec // test
			}
			closed <- err
		}()
		released(key(conv), left, time.Second)
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Error("the DELETE blocked")
		}
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("the abandoned call did not return")
		}
		cs.Close() //nolint:errcheck,gosec // test teardown
	})
}

// TestNamesCheckedBeforeLease: ids whose lease key is valid but whose claim
// scope or server names are not, and ids JSON decoding altered, are
// refused invalid_meta before any lease statement: no row, no token.
func TestNamesCheckedBeforeLease(t *testing.T) {
	h := newHarness(t, mcpfence.Config{CheckKey: func(k lease.Key) error {
		if len(k.SessionID) > 200 {
			return errors.New("too long for the file store")
		}
		return nil
	}}, lease.Config{})
	cs := h.client("desktop")
	for name, conv := range map[string]string{
		"scope":       strings.Repeat("é", 128), // 256 bytes: a valid key, a 757-byte scope
		"CheckKey":    strings.Repeat("a", 201),
		"U+FFFD":      "s4-\ufffd",
		"lone escape": "s4-\xff\xfe",
	} {
		res, err := call(t.Context(), cs, "write", conv, "", false, nil)
		if got := cause(res, err); got != mcpfence.CauseInvalidMeta {
			t.Errorf("%s: cause %s, want %s", name, got, mcpfence.CauseInvalidMeta)
		}
		if o, err := h.m.Inspect(t.Context(), lease.Key{AccountID: "acme", SessionID: conv}); err == nil && o.Token != 0 {
			t.Errorf("%s: a token was drawn: %+v", name, o)
		}
	}
	if n := h.calls.Load(); n != 0 {
		t.Errorf("the tool ran %d times", n)
	}
}

// TestNoKeyNamesWhatIsMissing: the no_key refusal of a missing account names
// the account's _meta key, not the conversation's.
func TestNoKeyNamesWhatIsMissing(t *testing.T) {
	h := newHarness(t, mcpfence.Config{Account: mcpfence.FromMeta(mcpfence.MetaAccount)}, lease.Config{})
	res, err := call(t.Context(), h.client("desktop"), "write", "c-"+uuid.NewString()[:8], "", false, nil)
	r, ok := mcpfence.RefusalFrom(res)
	if err != nil || !ok || r.Cause != mcpfence.CauseNoKey {
		t.Fatalf("want a no_key refusal, got %v %+v", err, res)
	}
	if !strings.Contains(r.Message, mcpfence.MetaAccount) || !strings.Contains(r.Message, "account") {
		t.Errorf("message %q does not name %s", r.Message, mcpfence.MetaAccount)
	}
}
