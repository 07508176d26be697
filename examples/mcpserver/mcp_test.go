package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/guards/fileguard"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/mcpfence"
	"github.com/fencekit/fencekit/sql/migrations"
)

// serverBin is the example server built once by TestMain, run as a child
// process by the stdio tests.
var serverBin string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		flag.Parse()
		if testing.Short() {
			return m.Run()
		}
		dir, err := os.MkdirTemp("", "mcpserver-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir) //nolint:errcheck // test teardown
		serverBin = filepath.Join(dir, "mcpserver")
		if out, err := exec.Command("go", "build", "-o", serverBin, ".").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building the server: %v\n%s", err, out)
			return 1
		}
		return m.Run()
	}())
}

// env is one transport's setup: a schema and a fileguard directory shared
// by every server of the test, and a way to connect a device.
type env struct {
	schema string
	dir    string
	pool   *pgxpool.Pool
	// connect starts a Go SDK client named name, signed in as user.
	connect func(t *testing.T, name, user string, onProgress func(*mcp.ProgressNotificationParams)) *mcp.ClientSession
}

// transports runs fn over streamable HTTP (one in-process server, the
// clients over real HTTP) and over stdio (each client starts its own server
// process, as MCP hosts do; the processes share the database and directory).
func transports(t *testing.T, fn func(t *testing.T, e *env)) {
	for _, tr := range []string{"http", "stdio"} {
		t.Run(tr, func(t *testing.T) {
			e := &env{schema: fencetest.Schema(t, migrations.Lease, migrations.Guard), dir: t.TempDir(), pool: fencetest.Pool(t)}
			switch tr {
			case "http":
				notes, err := NewNotes(t.Context(), e.pool, Options{Schema: e.schema, Dir: e.dir,
					Members: map[string][]string{"alice": {"acme"}, "mallory": {"other"}}, SMTP: os.Getenv("TEST_SMTP_ADDR")})
				if err != nil {
					t.Fatal(err)
				}
				srv := httptest.NewServer(notes.HTTPHandler())
				t.Cleanup(func() {
					srv.Close()
					if err := notes.Close(); err != nil {
						t.Error(err)
					}
				})
				e.connect = func(t *testing.T, name, user string, onProgress func(*mcp.ProgressNotificationParams)) *mcp.ClientSession {
					cs, err := ConnectHTTP(t.Context(), srv.URL+"/mcp", name, user, onProgress)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { cs.Close() }) //nolint:errcheck // test teardown
					return cs
				}
			case "stdio":
				e.connect = func(t *testing.T, name, user string, onProgress func(*mcp.ProgressNotificationParams)) *mcp.ClientSession {
					cmd := exec.Command(serverBin, "-schema", e.schema, "-dir", e.dir, "-user", user,
						"-members", "alice=acme,mallory=other")
					cmd.Env = append(os.Environ(), "DATABASE_URL="+fencetest.DatabaseURL())
					cmd.Stderr = testWriter{t, name}
					cs, err := Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, name, onProgress)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { cs.Close() }) //nolint:errcheck // test teardown (stops the process)
					return cs
				}
			}
			fn(t, e)
		})
	}
}

type testWriter struct {
	t    *testing.T
	name string
}

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s server: %s", w.name, strings.TrimSpace(string(p)))
	return len(p), nil
}

// progress collects progress notifications by token.
type progress struct {
	mu   sync.Mutex
	got  map[any][]string
	wake chan struct{}
}

func newProgress() *progress {
	return &progress{got: map[any][]string{}, wake: make(chan struct{}, 64)}
}

func (p *progress) handle(n *mcp.ProgressNotificationParams) {
	p.mu.Lock()
	k := fmt.Sprint(n.ProgressToken)
	p.got[k] = append(p.got[k], n.Message)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// await waits until token has n notifications and returns them.
func (p *progress) await(t *testing.T, token string, n int) []string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		p.mu.Lock()
		got := append([]string(nil), p.got[token]...)
		p.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-p.wake:
		case <-timeout:
			t.Fatalf("no %d progress notifications for %q (got %q)", n, token, got)
		}
	}
}

type callResult struct {
	res *mcp.CallToolResult
	err error
}

func goCall(ctx context.Context, d *Device, tool string, args map[string]any, run string, token any) <-chan callResult {
	ch := make(chan callResult, 1)
	go func() {
		res, err := d.Call(ctx, tool, args, run, false, token)
		ch <- callResult{res, err}
	}()
	return ch
}

func mustOK(t *testing.T, what string, res *mcp.CallToolResult, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: transport error %v", what, err)
	}
	if res.IsError {
		t.Fatalf("%s: error result %s", what, describe(res))
	}
}

func mustRefusal(t *testing.T, what string, res *mcp.CallToolResult, err error, cause string) mcpfence.Refusal {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: transport error %v, want a tool result refused with %s", what, err, cause)
	}
	r, ok := mcpfence.RefusalFrom(res)
	if !ok {
		t.Fatalf("%s: %s, want a refusal %s", what, describe(res), cause)
	}
	if r.Cause != cause {
		t.Fatalf("%s: refused with %s (%s), want %s", what, r.Cause, r.Message, cause)
	}
	if !res.IsError {
		t.Fatalf("%s: refusal without isError", what)
	}
	return r
}

// bodies returns how many times each note body is stored for conv.
func bodies(t *testing.T, e *env, conv string) map[string]int {
	t.Helper()
	rows, err := e.pool.Query(t.Context(), "SELECT body FROM "+pgx.Identifier{e.schema, "notes"}.Sanitize()+" WHERE conversation = $1", conv)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for rows.Next() {
		var b string
		if err := rows.Scan(&b); err != nil {
			t.Fatal(err)
		}
		out[b]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func inspect(t *testing.T, e *env, key lease.Key) lease.Ownership {
	t.Helper()
	m, err := lease.New(lease.Config{Pool: e.pool, Schema: e.schema})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close() //nolint:errcheck // holds nothing
	o, err := m.Inspect(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// TestTwoDevicesContinueHere is the two-devices story over MCP: the desktop
// runs calls of a run; the browser continues here; the desktop's in-flight
// call is refused as taken_over, its paused write arrives late and is
// refused as stale, its next call is refused, and nothing is written twice.
func TestTwoDevicesContinueHere(t *testing.T) {
	fencetest.SkipShort(t)
	transports(t, func(t *testing.T, e *env) {
		conv := "conv-" + uuid.NewString()[:8]
		pr := newProgress()
		desktop := &Device{Name: "desktop", Session: e.connect(t, "desktop", "alice", pr.handle), Account: "acme", Conv: conv}
		browser := &Device{Name: "browser", Session: e.connect(t, "browser", "alice", nil), Account: "acme", Conv: conv}
		ctx := t.Context()

		res, err := desktop.Call(ctx, "append_note", map[string]any{"text": "draft"}, StartRun, false, nil)
		mustOK(t, "desktop draft", res, err)
		run := RunHandle(res)
		inflight := goCall(ctx, desktop, "append_note", map[string]any{"text": "never written", "hold": true}, run, "hold")
		late := goCall(ctx, desktop, "append_note", map[string]any{"text": "late draft", "stall": true}, run, "stall")
		pr.await(t, "hold", 1)
		pr.await(t, "stall", 1)

		res, err = browser.Call(ctx, "continue_here", map[string]any{"text": "final"}, StartRun, false, nil)
		mustOK(t, "browser continue_here", res, err)
		brun := RunHandle(res)

		got := <-inflight
		r := mustRefusal(t, "desktop in-flight call", got.res, got.err, mcpfence.CauseTakenOver)
		if r.Owner == nil || r.Owner.Holder != "browser" || !r.Owner.Held {
			t.Errorf("in-flight refusal names owner %+v, want the browser, holding", r.Owner)
		}
		got = <-late
		r = mustRefusal(t, "desktop late write", got.res, got.err, mcpfence.CauseStale)
		if r.Presented == 0 || r.Presented >= r.Highest {
			t.Errorf("stale refusal: presented %d, highest %d", r.Presented, r.Highest)
		}
		if r.Owner == nil || r.Owner.Holder != "browser" {
			t.Errorf("stale refusal names owner %+v, want the browser", r.Owner)
		}
		res, err = desktop.Call(ctx, "append_note", map[string]any{"text": "after the takeover"}, run, false, nil)
		r = mustRefusal(t, "desktop's next call", res, err, mcpfence.CauseTakenOver)
		if r.Owner == nil || r.Owner.Holder != "browser" {
			t.Errorf("next-call refusal names owner %+v, want the browser", r.Owner)
		}
		res, err = browser.Call(ctx, "append_note", map[string]any{"text": "last word"}, brun, true, nil)
		mustOK(t, "browser's last call", res, err)

		want := map[string]int{"draft": 1, "final": 1, "last word": 1}
		if b := bodies(t, e, conv); fmt.Sprint(b) != fmt.Sprint(want) {
			t.Errorf("stored notes %v, want %v", b, want)
		}
		files, err := fileguard.New(fileguard.Config{Dir: e.dir})
		if err != nil {
			t.Fatal(err)
		}
		file, _, err := files.Get(ctx, lease.Key{AccountID: "acme", SessionID: conv}.Resource("latest-note.txt"))
		if err != nil || string(file) != "last word" {
			t.Errorf("latest-note file: %q, %v; want %q", file, err, "last word")
		}
		if o := inspect(t, e, lease.Key{AccountID: "acme", SessionID: conv}); o.State != lease.StateReleased || o.Holder != "browser" {
			t.Errorf("after the browser's run_end: %v by %q, want released by the browser", o.State, o.Holder)
		}
	})
}

// TestWaitWithProgress: a Wait tool waits while another device holds the
// conversation, telling the client who holds it, and runs once it is free.
func TestWaitWithProgress(t *testing.T) {
	fencetest.SkipShort(t)
	transports(t, func(t *testing.T, e *env) {
		conv := "conv-" + uuid.NewString()[:8]
		pr := newProgress()
		desktop := &Device{Name: "desktop", Session: e.connect(t, "desktop", "alice", nil), Account: "acme", Conv: conv}
		browser := &Device{Name: "browser", Session: e.connect(t, "browser", "alice", pr.handle), Account: "acme", Conv: conv}
		ctx := t.Context()

		res, err := desktop.Call(ctx, "append_note", map[string]any{"text": "one"}, StartRun, false, nil)
		mustOK(t, "desktop", res, err)
		run := RunHandle(res)
		res, err = browser.Call(ctx, "append_note", map[string]any{"text": "refused"}, "", false, nil)
		r := mustRefusal(t, "browser append_note while held", res, err, mcpfence.CauseHeld)
		if r.Owner == nil || r.Owner.Holder != "desktop" {
			t.Errorf("held refusal names owner %+v, want the desktop", r.Owner)
		}
		waiting := goCall(ctx, browser, "queue_note", map[string]any{"text": "two"}, "", "wait")
		msgs := pr.await(t, "wait", 1)
		if !strings.Contains(msgs[0], `"desktop"`) {
			t.Errorf("progress %q does not name the holder", msgs[0])
		}
		select {
		case got := <-waiting:
			t.Fatalf("queue_note returned while the desktop held the conversation: %s %v", describe(got.res), got.err)
		default:
		}
		res, err = desktop.Call(ctx, "append_note", map[string]any{"text": "three"}, run, true, nil) // ends the run
		mustOK(t, "desktop run_end", res, err)
		got := <-waiting
		mustOK(t, "queue_note", got.res, got.err)
		if b := bodies(t, e, conv); b["one"] != 1 || b["two"] != 1 || b["three"] != 1 || len(b) != 3 {
			t.Errorf("stored notes %v", b)
		}
	})
}

// TestCancelReleases: notifications/cancelled ends the tool's work and the
// call's lease is released at once (not left to expire after its TTL).
func TestCancelReleases(t *testing.T) {
	fencetest.SkipShort(t)
	transports(t, func(t *testing.T, e *env) {
		conv := "conv-" + uuid.NewString()[:8]
		key := lease.Key{AccountID: "acme", SessionID: conv}
		pr := newProgress()
		desktop := &Device{Name: "desktop", Session: e.connect(t, "desktop", "alice", pr.handle), Account: "acme", Conv: conv}

		m, err := lease.New(lease.Config{Pool: e.pool, Schema: e.schema})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close() //nolint:errcheck // holds nothing
		w, err := m.Watch(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()

		cctx, cancel := context.WithCancel(t.Context())
		call := goCall(cctx, desktop, "append_note", map[string]any{"text": "never written", "hold": true}, "", "hold")
		pr.await(t, "hold", 1)
		if o := inspect(t, e, key); !o.Held() || o.Holder != "desktop" {
			t.Fatalf("while the call runs: %v by %q, want held by the desktop", o.State, o.Holder)
		}
		cancel()
		if got := <-call; !errors.Is(got.err, context.Canceled) {
			t.Fatalf("cancelled call returned %v, %v", got.res, got.err)
		}
		// Released well inside the TTL (an expiry would take lease.DefaultTTL).
		wctx, wcancel := context.WithTimeout(t.Context(), lease.DefaultTTL/2)
		defer wcancel()
		for {
			ev, err := w.Next(wctx)
			if err != nil {
				t.Fatalf("no release seen: %v", err)
			}
			if ev.State == lease.StateReleased {
				break
			}
		}
		if b := bodies(t, e, conv); len(b) != 0 {
			t.Errorf("stored notes %v, want none", b)
		}
	})
}

// TestNonMemberRefused: a caller who is not a member of the account is
// refused before any lease statement: no lease row, no token, no note.
func TestNonMemberRefused(t *testing.T) {
	fencetest.SkipShort(t)
	transports(t, func(t *testing.T, e *env) {
		conv := "conv-" + uuid.NewString()[:8]
		mallory := &Device{Name: "mallory", Session: e.connect(t, "mallory", "mallory", nil), Account: "acme", Conv: conv}
		for _, tool := range []string{"append_note", "queue_note", "continue_here"} {
			res, err := mallory.Call(t.Context(), tool, map[string]any{"text": "intrusion"}, "", false, nil)
			r := mustRefusal(t, tool, res, err, mcpfence.CauseUnauthorized)
			if !strings.Contains(r.Message, "not a member") {
				t.Errorf("%s: message %q", tool, r.Message)
			}
		}
		if o := inspect(t, e, lease.Key{AccountID: "acme", SessionID: conv}); o.State != lease.StateNotFound {
			t.Errorf("lease row after refused calls: %v", o.State)
		}
		if b := bodies(t, e, conv); len(b) != 0 {
			t.Errorf("stored notes %v, want none", b)
		}
	})
}

// TestMalformedMeta: wrong types, huge or empty ids and a missing key give
// clear tool errors and touch nothing.
func TestMalformedMeta(t *testing.T) {
	fencetest.SkipShort(t)
	transports(t, func(t *testing.T, e *env) {
		cs := e.connect(t, "desktop", "alice", nil)
		conv := "conv-" + uuid.NewString()[:8]
		huge := strings.Repeat("x", 10000)
		cases := []struct {
			name  string
			meta  mcp.Meta
			cause string
			says  string
		}{
			{"missing conversation", mcp.Meta{mcpfence.MetaAccount: "acme"}, mcpfence.CauseNoKey, mcpfence.MetaConversation},
			{"missing account", mcp.Meta{mcpfence.MetaConversation: conv}, mcpfence.CauseNoKey, "account"},
			{"conversation a number", mcp.Meta{mcpfence.MetaAccount: "acme", mcpfence.MetaConversation: 42}, mcpfence.CauseInvalidMeta, "want a string, got a number"},
			{"account an object", mcp.Meta{mcpfence.MetaAccount: map[string]any{"id": "acme"}, mcpfence.MetaConversation: conv}, mcpfence.CauseInvalidMeta, "got an object"},
			{"conversation huge", mcp.Meta{mcpfence.MetaAccount: "acme", mcpfence.MetaConversation: huge}, mcpfence.CauseInvalidMeta, "10000 bytes"},
			{"conversation empty", mcp.Meta{mcpfence.MetaAccount: "acme", mcpfence.MetaConversation: ""}, mcpfence.CauseInvalidMeta, "empty"},
			{"run an array", mcp.Meta{mcpfence.MetaAccount: "acme", mcpfence.MetaConversation: conv, mcpfence.MetaRun: []any{"r"}}, mcpfence.CauseInvalidMeta, "got an array"},
			{"run huge", mcp.Meta{mcpfence.MetaAccount: "acme", mcpfence.MetaConversation: conv, mcpfence.MetaRun: huge}, mcpfence.CauseInvalidMeta, mcpfence.MetaRun},
			{"run_end a string", mcp.Meta{mcpfence.MetaAccount: "acme", mcpfence.MetaConversation: conv, mcpfence.MetaRun: uuid.NewString(), mcpfence.MetaRunEnd: "yes"}, mcpfence.CauseInvalidMeta, "want a boolean"},
			{"run not a handle", mcp.Meta{mcpfence.MetaAccount: "acme", mcpfence.MetaConversation: conv, mcpfence.MetaRun: "r"}, mcpfence.CauseInvalidMeta, "not a run handle"},
			{"run_start with run", mcp.Meta{mcpfence.MetaAccount: "acme", mcpfence.MetaConversation: conv, mcpfence.MetaRun: uuid.NewString(), mcpfence.MetaRunStart: true}, mcpfence.CauseInvalidMeta, "starts a run or continues one"},
			{"run_end without run", mcp.Meta{mcpfence.MetaAccount: "acme", mcpfence.MetaConversation: conv, mcpfence.MetaRunEnd: true}, mcpfence.CauseInvalidMeta, "without"},
		}
		for _, c := range cases {
			res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Meta: c.meta, Name: "append_note", Arguments: map[string]any{"text": "x"}})
			r := mustRefusal(t, c.name, res, err, c.cause)
			if !strings.Contains(r.Message, c.says) {
				t.Errorf("%s: message %q does not say %q", c.name, r.Message, c.says)
			}
		}
		if o := inspect(t, e, lease.Key{AccountID: "acme", SessionID: conv}); o.State != lease.StateNotFound {
			t.Errorf("lease row after refused calls: %v", o.State)
		}
		if b := bodies(t, e, conv); len(b) != 0 {
			t.Errorf("stored notes %v, want none", b)
		}
	})
}

// TestEveryToolHasPolicy: every tool the server serves (send_email with
// it, the server having an SMTP server) has a policy in the server's Fence,
// so that none of them is refused unknown_tool.
func TestEveryToolHasPolicy(t *testing.T) {
	fencetest.SkipShort(t)
	smtp := os.Getenv("TEST_SMTP_ADDR")
	if smtp == "" {
		fencetest.Missing(t, "TEST_SMTP_ADDR is not set (scripts/services.sh starts Mailpit): send_email is served only with an SMTP server")
	}
	schema := fencetest.Schema(t, migrations.Lease, migrations.Guard)
	notes, err := NewNotes(t.Context(), fencetest.Pool(t), Options{Schema: schema, Dir: t.TempDir(), SMTP: smtp})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := notes.Close(); err != nil {
			t.Error(err)
		}
	}()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := notes.Server().Connect(t.Context(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "lister", Version: "v0"}, nil).Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cs.Close(); ss.Wait() }() //nolint:errcheck // test teardown
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if p := notes.Fence.Policy(tool.Name); p == 0 {
			t.Errorf("tool %q is served but has no policy: its calls are refused %s", tool.Name, mcpfence.CauseUnknownTool)
		}
	}
	if !slices.Contains(names, "send_email") || len(names) != 5 {
		t.Errorf("served tools %v: want the five, send_email among them", names)
	}
}
