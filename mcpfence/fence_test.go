package mcpfence_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/leasetrace"
	"github.com/fencekit/fencekit/mcpfence"
	"github.com/fencekit/fencekit/sql/migrations"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// harness is one MCP server (in-memory transports) whose tools record the
// claims they ran under.
type harness struct {
	t      *testing.T
	m      *lease.Manager
	f      *mcpfence.Fence
	server *mcp.Server
	schema string

	mu     sync.Mutex
	active map[string]int // conversation -> calls running inside the tool
	max    map[string]int // conversation -> most calls seen running at once
	calls  atomic.Int64
}

func newHarness(t *testing.T, cfg mcpfence.Config, mcfg lease.Config) *harness {
	t.Helper()
	fencetest.SkipShort(t)
	return newReplica(t, cfg, mcfg, fencetest.Schema(t, migrations.Lease))
}

// replica is another server sharing h's database schema, with a pool, a
// lease Manager and a Fence of its own: another replica of the service
// behind a load balancer (or the service restarted).
func (h *harness) replica(cfg mcpfence.Config, mcfg lease.Config) *harness {
	h.t.Helper()
	return newReplica(h.t, cfg, mcfg, h.schema)
}

func newReplica(t *testing.T, cfg mcpfence.Config, mcfg lease.Config, schema string) *harness {
	t.Helper()
	h := &harness{t: t, active: map[string]int{}, max: map[string]int{}}
	h.schema = schema
	if mcfg.Pool == nil { // a test's own pool (a tracer's, say), else a new one
		mcfg.Pool = fencetest.Pool(t)
	}
	mcfg.Schema = h.schema
	var err error
	if h.m, err = lease.New(mcfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.m.Close() }) //nolint:errcheck // test teardown
	cfg.Manager = h.m
	if cfg.Account == nil {
		cfg.Account = mcpfence.Fixed("acme")
	}
	if cfg.Tools == nil {
		cfg.Tools = map[string]mcpfence.Policy{"write": mcpfence.Acquire, "take": mcpfence.ContinueHere, "read": mcpfence.Unfenced, "fail": mcpfence.Acquire}
	}
	if h.f, err = mcpfence.New(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.f.Close(); err != nil {
			t.Error(err)
		}
	})
	h.server = mcp.NewServer(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
	h.server.AddReceivingMiddleware(h.f.Middleware)
	type in struct {
		Hold    bool `json:"hold,omitempty"`
		SleepMS int  `json:"sleep_ms,omitempty"`
	}
	tool := func(ctx context.Context, req *mcp.CallToolRequest, a in) (*mcp.CallToolResult, map[string]any, error) {
		h.calls.Add(1)
		claim, err := fence.ClaimFromContext(ctx)
		if err != nil {
			return nil, nil, err
		}
		conv, _ := req.Params.Meta[mcpfence.MetaConversation].(string)
		h.mu.Lock()
		h.active[conv]++
		h.max[conv] = max(h.max[conv], h.active[conv])
		h.mu.Unlock()
		defer func() {
			h.mu.Lock()
			h.active[conv]--
			h.mu.Unlock()
		}()
		if a.Hold {
			<-ctx.Done()
			return nil, nil, context.Cause(ctx)
		}
		time.Sleep(time.Millisecond + time.Duration(a.SleepMS)*time.Millisecond) // widen the window in which two holders would overlap
		return nil, map[string]any{"token": claim.Token.String(), "run": claim.Run}, nil
	}
	mcp.AddTool(h.server, &mcp.Tool{Name: "write"}, tool)
	mcp.AddTool(h.server, &mcp.Tool{Name: "take"}, tool)
	mcp.AddTool(h.server, &mcp.Tool{Name: "fail"}, func(ctx context.Context, _ *mcp.CallToolRequest, a struct {
		Kind string `json:"kind"`
	}) (*mcp.CallToolResult, map[string]any, error) {
		claim, err := fence.ClaimFromContext(ctx)
		if err != nil {
			return nil, nil, err
		}
		switch a.Kind {
		case "outcome_unknown":
			return nil, nil, fence.OutcomeUnknown(ctx, "test: commit", "r1", errors.New("connection reset"))
		case "stale":
			return nil, nil, fmt.Errorf("writing: %w", &fence.StaleError{Resource: "r1", Presented: claim.Token, Highest: claim.Token + 5})
		default:
			return nil, nil, errors.New("the tool's own failure")
		}
	})
	mcp.AddTool(h.server, &mcp.Tool{Name: "read"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ in) (*mcp.CallToolResult, map[string]any, error) {
		_, err := fence.ClaimFromContext(ctx)
		return nil, map[string]any{"has_claim": err == nil}, nil
	})
	return h
}

// client connects a client named name over in-memory transports.
func (h *harness) client(name string) *mcp.ClientSession {
	h.t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := h.server.Connect(h.t.Context(), st, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: name, Version: "v0"}, nil).Connect(h.t.Context(), ct, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() {
		cs.Close() //nolint:errcheck // test teardown
		ss.Wait()  //nolint:errcheck // test teardown
	})
	return cs
}

func call(ctx context.Context, cs *mcp.ClientSession, tool, conv, run string, end bool, args map[string]any) (*mcp.CallToolResult, error) {
	meta := mcp.Meta{mcpfence.MetaConversation: conv}
	if run != "" {
		meta[mcpfence.MetaRun] = run
	}
	if end {
		meta[mcpfence.MetaRunEnd] = true
	}
	return cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Meta: meta, Arguments: args})
}

func cause(res *mcp.CallToolResult, err error) string {
	if err != nil {
		return "transport error: " + err.Error()
	}
	if r, ok := mcpfence.RefusalFrom(res); ok {
		return r.Cause
	}
	if res.IsError {
		return "tool error"
	}
	return "ok"
}

func (h *harness) watchReleased(key lease.Key, within time.Duration) {
	h.t.Helper()
	w, err := h.m.Watch(h.t.Context(), key)
	if err != nil {
		h.t.Fatal(err)
	}
	defer w.Close()
	ctx, cancel := context.WithTimeout(h.t.Context(), within)
	defer cancel()
	for {
		ev, err := w.Next(ctx)
		if err != nil {
			h.t.Fatalf("%s not released within %s: %v", key, within, err)
		}
		if ev.State == lease.StateReleased {
			return
		}
	}
}

// TestConcurrentCallsExclude: many clients call fenced tools of a few
// conversations at once; per conversation at most one call runs inside the
// tool at any time, each call either ran or was refused as held, and
// unfenced tools run without a claim.
func TestConcurrentCallsExclude(t *testing.T) {
	h := newHarness(t, mcpfence.Config{}, lease.Config{})
	const clients, perClient, convs = 8, 6, 3
	var ok, held atomic.Int64
	var wg sync.WaitGroup
	for i := range clients {
		cs := h.client(fmt.Sprintf("client-%d", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range perClient {
				conv := fmt.Sprintf("conv-%d", (i+j)%convs)
				switch c := cause(call(t.Context(), cs, "write", conv, "", false, nil)); c {
				case "ok":
					ok.Add(1)
				case mcpfence.CauseHeld:
					held.Add(1)
				default:
					t.Errorf("client %d call %d: %s", i, j, c)
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load()+held.Load() != clients*perClient || ok.Load() == 0 || ok.Load() != h.calls.Load() {
		t.Errorf("%d ran, %d held, %d tool calls, of %d", ok.Load(), held.Load(), h.calls.Load(), clients*perClient)
	}
	for conv, m := range h.max {
		if m > 1 {
			t.Errorf("%s: %d calls ran inside the tool at once", conv, m)
		}
	}
	res, err := call(t.Context(), h.client("reader"), "read", "conv-0", "", false, nil)
	if c := cause(res, err); c != "ok" || fmt.Sprint(res.StructuredContent) != "map[has_claim:false]" {
		t.Errorf("unfenced read: %s %v", c, res.StructuredContent)
	}
}

// TestSpanPerCall: one fencekit.mcp.tool_call span per fenced call, parent
// of the lease's acquire and release spans.
func TestSpanPerCall(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	h := newHarness(t, mcpfence.Config{TracerProvider: tp}, lease.Config{TracerProvider: tp})
	cs := h.client("desktop")
	if c := cause(call(t.Context(), cs, "write", "c1", "", false, nil)); c != "ok" {
		t.Fatal(c)
	}
	// The release runs after the result went back: wait for its span.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if slices.ContainsFunc(sr.Ended(), func(s sdktrace.ReadOnlySpan) bool { return s.Name() == leasetrace.SpanRelease }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no release span within 5s")
		}
	}
	var tool sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if s.Name() == mcpfence.SpanToolCall {
			tool = s
		}
	}
	if tool == nil {
		t.Fatalf("no %s span", mcpfence.SpanToolCall)
	}
	attrs := map[string]string{}
	for _, a := range tool.Attributes() {
		attrs[string(a.Key)] = a.Value.String()
	}
	if attrs[mcpfence.AttrTool] != "write" || attrs[mcpfence.AttrOutcome] != "ok" || attrs[leasetrace.AttrSessionID] != "c1" || attrs[leasetrace.AttrToken] == "" {
		t.Errorf("span attributes %v", attrs)
	}
	children := map[string]bool{}
	for _, s := range sr.Ended() {
		if s.Parent().SpanID() == tool.SpanContext().SpanID() {
			children[s.Name()] = true
		}
	}
	if !children[leasetrace.SpanAcquire] || !children[leasetrace.SpanRelease] {
		t.Errorf("children of the tool call span: %v", children)
	}
}

// TestRunNotBoundToSession: a run is named by its handle, not by the MCP
// session that began it: another session (another device's client, or the
// same client reconnected) continues it under the same token; the handle
// presented for another conversation is refused; run_end ends it.
func TestRunNotBoundToSession(t *testing.T) {
	h := newHarness(t, mcpfence.Config{}, lease.Config{})
	a, b := h.client("a"), h.client("b")
	run, first := startRun(t, a, "write", "c1", nil)
	info := mustRunCall(t, "another session presenting the handle", b, "write", "c1", run, false)
	if info.Token != first.Token || info.RunID != run {
		t.Errorf("another session's call ran under %+v, want the run's %+v", info, first)
	}
	if c := cause(call(t.Context(), a, "write", "c2", run, false, nil)); c != mcpfence.CauseRunEnded {
		t.Errorf("the run presented for another conversation: %s", c)
	}
	mustRunCall(t, "the run's own last call", a, "write", "c1", run, true)
	if c := cause(call(t.Context(), a, "write", "c1", run, false, nil)); c != mcpfence.CauseRunEnded {
		t.Errorf("a call of the ended run: %s", c)
	}
}

// TestIdleRunReleased: a run nobody continues does not hold its
// conversation past RunIdle: its parked grant expires in the database, and
// its handle is then refused.
func TestIdleRunReleased(t *testing.T) {
	h := newHarness(t, mcpfence.Config{RunIdle: 200 * time.Millisecond}, lease.Config{})
	cs := h.client("desktop")
	run, _ := startRun(t, cs, "write", "c1", nil)
	key := lease.Key{AccountID: "acme", SessionID: "c1"}
	if o, err := h.m.Inspect(t.Context(), key); err != nil || !o.Held() || !o.Parked || o.RunID.String() != run {
		t.Fatalf("between the run's calls: %+v, %v (want held and parked)", o, err)
	}
	waitNotHeld(t, h.m, key, 5*time.Second)
	if c := cause(call(t.Context(), cs, "write", "c1", run, false, nil)); c != mcpfence.CauseRunEnded {
		t.Errorf("a call of the idle run: %s", c)
	}
	if c := cause(call(t.Context(), cs, "write", "c1", "", false, nil)); c != "ok" {
		t.Errorf("a call after the idle run: %s", c)
	}
}

// TestCloseReleasesRuns: Fence.Close refuses new calls and leaves the runs
// in the database, parked (a restarted or another replica continues them:
// TestRunSurvivesRestart); per-call leases are released.
func TestCloseReleasesRuns(t *testing.T) {
	h := newHarness(t, mcpfence.Config{}, lease.Config{})
	cs := h.client("desktop")
	run, _ := startRun(t, cs, "write", "c1", nil)
	if c := cause(call(t.Context(), cs, "write", "c9", "", false, nil)); c != "ok" {
		t.Fatal(c)
	}
	if err := h.f.Close(); err != nil {
		t.Fatal(err)
	}
	if o, err := h.m.Inspect(t.Context(), lease.Key{AccountID: "acme", SessionID: "c1"}); err != nil || !o.Parked || o.RunID.String() != run {
		t.Errorf("the run after Close: %+v, %v (want parked)", o, err)
	}
	if o, err := h.m.Inspect(t.Context(), lease.Key{AccountID: "acme", SessionID: "c9"}); err != nil || o.State != lease.StateReleased {
		t.Errorf("a per-call lease after Close: %v, %v", o.State, err)
	}
	for _, meta := range []mcp.Meta{{mcpfence.MetaRunStart: true}, {mcpfence.MetaRun: run}, {}} {
		if c := cause(callMeta(t.Context(), cs, "write", "c1", meta, nil)); c != mcpfence.CauseUnavailable {
			t.Errorf("a call with %v after Close: %s", meta, c)
		}
	}
}

// TestTakeoverEndsHandlerCtx: ContinueHere ends the displaced call's ctx
// with lease.ErrTakenOver; the call returns taken_over naming the new owner.
func TestTakeoverEndsHandlerCtx(t *testing.T) {
	h := newHarness(t, mcpfence.Config{}, lease.Config{})
	desktop, browser := h.client("desktop"), h.client("browser")
	done := make(chan string, 1)
	var refusal mcpfence.Refusal
	go func() {
		res, err := call(t.Context(), desktop, "write", "c1", "", false, map[string]any{"hold": true})
		refusal, _ = mcpfence.RefusalFrom(res)
		done <- cause(res, err)
	}()
	key := lease.Key{AccountID: "acme", SessionID: "c1"}
	w, err := h.m.Watch(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := w.Next(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if ev.Held() && ev.Holder == "desktop" {
			break
		}
	}
	w.Close()
	if c := cause(call(t.Context(), browser, "take", "c1", "", false, nil)); c != "ok" {
		t.Fatal(c)
	}
	if c := <-done; c != mcpfence.CauseTakenOver {
		t.Fatalf("displaced call: %s", c)
	}
	if refusal.Owner == nil || refusal.Owner.Holder != "browser" || refusal.Token == 0 || refusal.Owner.Token <= refusal.Token {
		t.Errorf("refusal %+v (owner %+v)", refusal, refusal.Owner)
	}
}

// TestWaitTimesOutHeld: a Wait call waits at most MaxWait, sending progress
// notifications that name the holder, then is refused as held, naming it.
func TestWaitTimesOutHeld(t *testing.T) {
	h := newHarness(t, mcpfence.Config{MaxWait: 400 * time.Millisecond, ProgressEvery: 50 * time.Millisecond,
		Tools: map[string]mcpfence.Policy{"write": mcpfence.Wait}}, lease.Config{})
	key := lease.Key{AccountID: "acme", SessionID: "c1"}
	l, err := h.m.Acquire(t.Context(), key, lease.WithHolder("phone"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.WithoutCancel(t.Context())) //nolint:errcheck // test teardown

	var mu sync.Mutex
	var msgs []string
	ct, st := mcp.NewInMemoryTransports()
	ss, err := h.server.Connect(t.Context(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "desktop", Version: "v0"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			msgs = append(msgs, req.Params.Message)
			mu.Unlock()
		}}).Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cs.Close(); ss.Wait() }() //nolint:errcheck // test teardown

	p := &mcp.CallToolParams{Name: "write", Meta: mcp.Meta{mcpfence.MetaConversation: "c1"}}
	p.SetProgressToken("w")
	start := time.Now()
	res, err := cs.CallTool(t.Context(), p)
	waited := time.Since(start)
	r, ok := mcpfence.RefusalFrom(res)
	if err != nil || !ok || r.Cause != mcpfence.CauseHeld || r.Owner == nil || r.Owner.Holder != "phone" || r.Owner.Token != l.Token() {
		t.Fatalf("after MaxWait: %+v (owner %+v), %v", r, r.Owner, err)
	}
	if waited < 400*time.Millisecond {
		t.Errorf("refused after %s, before MaxWait", waited)
	}
	if h.calls.Load() != 0 {
		t.Errorf("the tool ran %d times", h.calls.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(msgs) < 2 || !strings.Contains(msgs[0], `"phone"`) {
		t.Errorf("progress notifications %q: want several, naming the holder", msgs)
	}
}

// TestToolErrorsClassified: a guard's typed errors from inside the tool
// become refusals with their details; the tool's own errors stay its own.
func TestToolErrorsClassified(t *testing.T) {
	h := newHarness(t, mcpfence.Config{}, lease.Config{})
	cs := h.client("desktop")
	res, err := call(t.Context(), cs, "fail", "c1", "", false, map[string]any{"kind": "outcome_unknown"})
	r, ok := mcpfence.RefusalFrom(res)
	if err != nil || !ok || r.Cause != mcpfence.CauseOutcomeUnknown || r.Resource != "r1" || r.Token == 0 {
		t.Errorf("outcome unknown: %+v, %v", r, err)
	}
	res, err = call(t.Context(), cs, "fail", "c1", "", false, map[string]any{"kind": "stale"})
	r, ok = mcpfence.RefusalFrom(res)
	if err != nil || !ok || r.Cause != mcpfence.CauseStale || r.Presented == 0 || r.Highest != r.Presented+5 || r.Resource != "r1" {
		t.Errorf("stale: %+v, %v", r, err)
	}
	res, err = call(t.Context(), cs, "fail", "c1", "", false, map[string]any{"kind": "plain"})
	if _, ok := mcpfence.RefusalFrom(res); ok || err != nil || !res.IsError {
		t.Errorf("the tool's own error: %v %v", res, err)
	} else if txt := res.Content[0].(*mcp.TextContent).Text; txt != "the tool's own failure" {
		t.Errorf("the tool's own error text: %q", txt)
	}
	h.watchReleased(lease.Key{AccountID: "acme", SessionID: "c1"}, 5*time.Second)
}

// TestSequentialCallsAwaitRelease: a per-call lease is released after the
// result went back, and the next call of the conversation through the same
// Fence waits for that release: back-to-back Acquire calls are never
// refused as held by the previous call's lease.
func TestSequentialCallsAwaitRelease(t *testing.T) {
	h := newHarness(t, mcpfence.Config{}, lease.Config{})
	cs := h.client("desktop")
	for i := range 40 {
		if c := cause(call(t.Context(), cs, "write", "c1", "", false, nil)); c != "ok" {
			t.Fatalf("call %d: %s", i, c)
		}
	}
	h.watchReleased(lease.Key{AccountID: "acme", SessionID: "c1"}, 5*time.Second)
	if err := h.f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestReleaseBeforeReply: with Config.ReleaseBeforeReply the conversation
// is free as soon as a call's result has arrived.
func TestReleaseBeforeReply(t *testing.T) {
	h := newHarness(t, mcpfence.Config{ReleaseBeforeReply: true}, lease.Config{})
	cs := h.client("desktop")
	for i := range 5 {
		if c := cause(call(t.Context(), cs, "write", "c1", "", false, nil)); c != "ok" {
			t.Fatalf("call %d: %s", i, c)
		}
		if o, err := h.m.Inspect(t.Context(), lease.Key{AccountID: "acme", SessionID: "c1"}); err != nil || o.State != lease.StateReleased {
			t.Fatalf("after call %d returned: %v, %v (want released)", i, o.State, err)
		}
	}
}
