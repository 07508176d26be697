package mcpfence_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/mcpfence"
)

// Runs that live in the database: every test here runs two (or more)
// replicas, each with a pool, a lease Manager, a Fence and an MCP server of
// its own, sharing one database schema, as replicas behind a round-robin
// load balancer do.

// callMeta calls tool in conv with extra _meta entries.
func callMeta(ctx context.Context, cs *mcp.ClientSession, tool, conv string, extra mcp.Meta, args map[string]any) (*mcp.CallToolResult, error) {
	meta := mcp.Meta{mcpfence.MetaConversation: conv}
	for k, v := range extra {
		meta[k] = v
	}
	return cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Meta: meta, Arguments: args})
}

// leaseInfo decodes a result's MetaLease.
func leaseInfo(t *testing.T, res *mcp.CallToolResult) mcpfence.LeaseInfo {
	t.Helper()
	var info mcpfence.LeaseInfo
	b, err := json.Marshal(res.Meta[mcpfence.MetaLease])
	if err == nil {
		err = json.Unmarshal(b, &info)
	}
	if err != nil || info.Token == 0 {
		t.Fatalf("the result's %s: %s, %v", mcpfence.MetaLease, b, err)
	}
	return info
}

// startRun starts a run with a call of tool in conv and returns its handle
// and the first call's LeaseInfo.
func startRun(t *testing.T, cs *mcp.ClientSession, tool, conv string, args map[string]any) (string, mcpfence.LeaseInfo) {
	t.Helper()
	res, err := callMeta(t.Context(), cs, tool, conv, mcp.Meta{mcpfence.MetaRunStart: true}, args)
	if c := cause(res, err); c != "ok" {
		t.Fatalf("the run's first call: %s", c)
	}
	info := leaseInfo(t, res)
	if info.Run == "" || info.Run != info.RunID {
		t.Fatalf("the run's first call: handle %q, lease run_id %q (want the run_id)", info.Run, info.RunID)
	}
	if run, _ := res.StructuredContent.(map[string]any)["run"].(string); run != info.RunID {
		t.Fatalf("the tool's claim names run %q, the result %q", run, info.RunID)
	}
	return info.Run, info
}

// mustRunCall makes a call of run (end: its last) and returns its LeaseInfo.
func mustRunCall(t *testing.T, what string, cs *mcp.ClientSession, tool, conv, run string, end bool) mcpfence.LeaseInfo {
	t.Helper()
	res, err := call(t.Context(), cs, tool, conv, run, end, nil)
	if c := cause(res, err); c != "ok" {
		t.Fatalf("%s: %s", what, c)
	}
	info := leaseInfo(t, res)
	if info.Run != run || info.RunID != run {
		t.Fatalf("%s: ran under %+v, want run %s", what, info, run)
	}
	return info
}

// waitNotHeld waits until key is no longer held.
func waitNotHeld(t *testing.T, m *lease.Manager, key lease.Key, within time.Duration) lease.Ownership {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(20 * time.Millisecond) {
		o, err := m.Inspect(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		if !o.Held() {
			return o
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still held after %s: %+v", key, within, o)
		}
	}
}

// TestRunAcrossReplicas: each call of a run lands on the other replica and
// continues the run under its one lease (same run_id, same token); between
// calls the run is parked in the database; run_end on either replica
// releases it.
func TestRunAcrossReplicas(t *testing.T) {
	a := newHarness(t, mcpfence.Config{}, lease.Config{})
	b := a.replica(mcpfence.Config{}, lease.Config{})
	ca, cb := a.client("desktop"), b.client("desktop")
	key := lease.Key{AccountID: "acme", SessionID: "c1"}
	run, first := startRun(t, ca, "write", "c1", nil)
	for i, cs := range []*mcp.ClientSession{cb, ca, cb, ca} {
		if o, err := a.m.Inspect(t.Context(), key); err != nil || !o.Held() || !o.Parked || o.RunID.String() != run || o.Token != first.Token {
			t.Fatalf("before call %d: %+v, %v (want the run parked)", i, o, err)
		}
		info := mustRunCall(t, fmt.Sprintf("call %d", i), cs, "write", "c1", run, false)
		if info.Token != first.Token {
			t.Fatalf("call %d: token %d, the run's is %d", i, info.Token, first.Token)
		}
	}
	if a.calls.Load() != 3 || b.calls.Load() != 2 {
		t.Errorf("the tool ran %d times on a, %d on b; want 3 and 2", a.calls.Load(), b.calls.Load())
	}
	// Another run is refused while this one is parked.
	if c := cause(call(t.Context(), ca, "write", "c1", "", false, nil)); c != mcpfence.CauseHeld {
		t.Errorf("a per-call lease while the run is parked: %s", c)
	}
	mustRunCall(t, "the last call, on b", cb, "write", "c1", run, true)
	if o, err := a.m.Inspect(t.Context(), key); err != nil || o.State != lease.StateReleased {
		t.Errorf("after run_end: %v, %v", o.State, err)
	}
	if c := cause(call(t.Context(), ca, "write", "c1", run, false, nil)); c != mcpfence.CauseRunEnded {
		t.Errorf("the ended run on a: %s", c)
	}
}

// TestRunBoundToConversation: a handle continues its run only for the
// account and conversation it holds; presented for another conversation or
// account, or by a caller the server does not authorize, it is refused, and
// the run goes on.
func TestRunBoundToConversation(t *testing.T) {
	a := newHarness(t, mcpfence.Config{}, lease.Config{})
	other := a.replica(mcpfence.Config{Account: mcpfence.Fixed("other")}, lease.Config{})
	denied := a.replica(mcpfence.Config{Authorize: func(context.Context, *mcp.CallToolRequest, lease.Key) error {
		return errors.New("not a member")
	}}, lease.Config{})
	ca := a.client("desktop")
	run, first := startRun(t, ca, "write", "c1", nil)
	if c := cause(call(t.Context(), a.client("phone"), "write", "c2", run, false, nil)); c != mcpfence.CauseRunEnded {
		t.Errorf("the handle for another conversation: %s", c)
	}
	if c := cause(call(t.Context(), other.client("desktop"), "write", "c1", run, false, nil)); c != mcpfence.CauseRunEnded {
		t.Errorf("the handle for another account: %s", c)
	}
	if c := cause(call(t.Context(), denied.client("desktop"), "write", "c1", run, false, nil)); c != mcpfence.CauseUnauthorized {
		t.Errorf("the handle presented by a caller the server refuses: %s", c)
	}
	if c := cause(call(t.Context(), ca, "write", "c1", "not-a-handle", false, nil)); c != mcpfence.CauseInvalidMeta {
		t.Errorf("a handle that is not a UUID: %s", c)
	}
	if other.calls.Load()+denied.calls.Load() != 0 {
		t.Errorf("the tool ran for a refused handle")
	}
	if info := mustRunCall(t, "the run's own conversation", ca, "write", "c1", run, false); info.Token != first.Token {
		t.Errorf("the run after the refusals: token %d, want %d", info.Token, first.Token)
	}
}

// TestRunSurvivesRestart: a run continues on a new Fence and Manager after
// the replica that ran its first call closed.
func TestRunSurvivesRestart(t *testing.T) {
	a := newHarness(t, mcpfence.Config{}, lease.Config{})
	run, first := startRun(t, a.client("desktop"), "write", "c1", nil)
	if err := a.f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.m.Close(); err != nil {
		t.Fatal(err)
	}
	restarted := a.replica(mcpfence.Config{}, lease.Config{})
	info := mustRunCall(t, "after the restart", restarted.client("desktop"), "write", "c1", run, true)
	if info.Token != first.Token {
		t.Errorf("after the restart: token %d, want the run's %d", info.Token, first.Token)
	}
}

// TestRunIdleAcrossReplicas: RunIdle counts from a run's last call on any
// replica: a call on the other replica within RunIdle continues it (and
// parks it for RunIdle again); after RunIdle with no call the conversation
// is free and the handle is refused on every replica.
func TestRunIdleAcrossReplicas(t *testing.T) {
	// Calls idle/4 apart: the margin (3/4 of idle) absorbs a loaded
	// machine's slow calls; the row must still expire once they stop.
	const idle = time.Second
	a := newHarness(t, mcpfence.Config{RunIdle: idle}, lease.Config{})
	b := a.replica(mcpfence.Config{RunIdle: idle}, lease.Config{})
	ca, cb := a.client("desktop"), b.client("desktop")
	run, _ := startRun(t, ca, "write", "c1", nil)
	for i := range 3 {
		time.Sleep(idle / 4)
		cs := []*mcp.ClientSession{cb, ca}[i%2]
		mustRunCall(t, fmt.Sprintf("call %d, %s after the previous one", i, idle/4), cs, "write", "c1", run, false)
	}
	o := waitNotHeld(t, b.m, lease.Key{AccountID: "acme", SessionID: "c1"}, 5*time.Second)
	if o.RunID.String() != run || o.State != lease.StateExpired {
		t.Errorf("the idle run's row: %+v (want the run's, expired)", o)
	}
	for name, cs := range map[string]*mcp.ClientSession{"a": ca, "b": cb} {
		if c := cause(call(t.Context(), cs, "write", "c1", run, false, nil)); c != mcpfence.CauseRunEnded {
			t.Errorf("the idle run on %s: %s", name, c)
		}
	}
	if c := cause(call(t.Context(), cb, "write", "c1", "", false, nil)); c != "ok" {
		t.Errorf("a new call after the idle run: %s", c)
	}
}

// TestTakeoverEndsRun: a takeover (ContinueHere) by another device on the
// other replica ends a parked run: its handle is refused taken_over, naming
// the new owner, on every replica.
func TestTakeoverEndsRun(t *testing.T) {
	a := newHarness(t, mcpfence.Config{}, lease.Config{})
	b := a.replica(mcpfence.Config{}, lease.Config{})
	desktop, browser := a.client("desktop"), b.client("browser")
	run, first := startRun(t, desktop, "write", "c1", nil)
	res, err := call(t.Context(), browser, "take", "c1", "", false, nil)
	if c := cause(res, err); c != "ok" {
		t.Fatal(c)
	}
	took := leaseInfo(t, res)
	for name, cs := range map[string]*mcp.ClientSession{"a": desktop, "b": b.client("desktop")} {
		res, err := call(t.Context(), cs, "write", "c1", run, false, nil)
		r, ok := mcpfence.RefusalFrom(res)
		if err != nil || !ok || r.Cause != mcpfence.CauseTakenOver || r.Owner == nil || r.Owner.Holder != "browser" || r.Owner.Token != took.Token || took.Token <= first.Token {
			t.Errorf("the displaced run's call on %s: %+v (owner %+v), %v", name, r, r.Owner, err)
		}
	}
	if a.calls.Load() != 1 {
		t.Errorf("the tool ran %d times on a, want once (the run's first call)", a.calls.Load())
	}
}

// TestRunFirstCallFailed: a run whose first call did not succeed (the
// tool's error, invalid arguments) is released at once, not left holding
// the conversation, and its result names no handle.
func TestRunFirstCallFailed(t *testing.T) {
	a := newHarness(t, mcpfence.Config{}, lease.Config{})
	cs := a.client("desktop")
	key := lease.Key{AccountID: "acme", SessionID: "c1"}
	for name, c := range map[string]struct {
		tool string
		args map[string]any
	}{
		"the tool's own error": {"fail", map[string]any{"kind": "plain"}},
		"a guard's refusal":    {"fail", map[string]any{"kind": "stale"}},
		"invalid arguments":    {"write", map[string]any{"hold": "not a boolean"}},
	} {
		res, err := callMeta(t.Context(), cs, c.tool, "c1", mcp.Meta{mcpfence.MetaRunStart: true}, c.args)
		if err == nil && !res.IsError {
			t.Fatalf("%s: the first call succeeded", name)
		}
		if err == nil && res.Meta[mcpfence.MetaLease] != nil {
			t.Errorf("%s: the failed first call names a run: %v", name, res.Meta[mcpfence.MetaLease])
		}
		o, ierr := a.m.Inspect(t.Context(), key)
		if ierr != nil || o.State != lease.StateReleased {
			t.Errorf("%s: the run after its first call failed: %v, %v (want released when the result arrives)", name, o.State, ierr)
		}
		if c := cause(call(t.Context(), cs, "write", "c1", o.RunID.String(), false, nil)); c != mcpfence.CauseRunEnded {
			t.Errorf("%s: a call of the failed run: %s", name, c)
		}
	}
}

// TestRunWaitsForOtherReplica: a call of a run that is running on the
// other replica waits (with backoff) until that call returns and parks the
// run, then runs under the same token; never both at once. A replica whose
// MaxWait passes first refuses the call held.
func TestRunWaitsForOtherReplica(t *testing.T) {
	a := newHarness(t, mcpfence.Config{}, lease.Config{})
	b := a.replica(mcpfence.Config{}, lease.Config{})
	impatient := a.replica(mcpfence.Config{MaxWait: 100 * time.Millisecond}, lease.Config{})
	ca, cb := a.client("desktop"), b.client("desktop")
	key := lease.Key{AccountID: "acme", SessionID: "c1"}
	run, first := startRun(t, ca, "write", "c1", nil)

	type outcome struct {
		info  mcpfence.LeaseInfo
		cause string
		at    time.Time
	}
	slow := make(chan outcome, 1)
	go func() {
		res, err := call(t.Context(), ca, "write", "c1", run, false, map[string]any{"sleep_ms": 600})
		o := outcome{cause: cause(res, err), at: time.Now()}
		if o.cause == "ok" {
			_ = json.Unmarshal(must(json.Marshal(res.Meta[mcpfence.MetaLease])), &o.info)
		}
		slow <- o
	}()
	// Wait until a has resumed the run (the row is no longer parked).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		o, err := a.m.Inspect(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		if o.Held() && !o.Parked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a never resumed the run: %+v", o)
		}
	}
	r, err := call(t.Context(), impatient.client("desktop"), "write", "c1", run, false, nil)
	if c := cause(r, err); c != mcpfence.CauseHeld {
		t.Errorf("a replica with a MaxWait shorter than the running call: %s", c)
	}
	info := mustRunCall(t, "the call on b while a runs one", cb, "write", "c1", run, false)
	done := time.Now()
	o := <-slow
	if o.cause != "ok" || o.info.Token != first.Token || info.Token != first.Token {
		t.Fatalf("a's call %s %+v, b's %+v; want both under token %d", o.cause, o.info, info, first.Token)
	}
	if done.Before(o.at) {
		t.Errorf("b's call returned %s before a's: they overlapped", o.at.Sub(done))
	}
	if impatient.calls.Load() != 0 {
		t.Errorf("the impatient replica ran the tool")
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestUnknownTool: a tool the Fence has no policy for (neither Tools nor
// Default names one) is refused unknown_tool before anything is read or
// sent; with a Default it runs under that policy.
func TestUnknownTool(t *testing.T) {
	a := newHarness(t, mcpfence.Config{Tools: map[string]mcpfence.Policy{"take": mcpfence.ContinueHere}}, lease.Config{})
	res, err := a.client("desktop").CallTool(t.Context(), &mcp.CallToolParams{Name: "write"}) // no _meta at all
	r, ok := mcpfence.RefusalFrom(res)
	if err != nil || !ok || r.Cause != mcpfence.CauseUnknownTool || r.Tool != "write" {
		t.Errorf("an unclassified tool: %+v, %v", r, err)
	}
	if a.calls.Load() != 0 {
		t.Error("the unclassified tool ran")
	}
	if o, err := a.m.Inspect(t.Context(), lease.Key{AccountID: "acme", SessionID: "c1"}); err != nil || o.State != lease.StateNotFound {
		t.Errorf("a lease statement was sent: %v, %v", o.State, err)
	}
	b := a.replica(mcpfence.Config{Tools: map[string]mcpfence.Policy{"take": mcpfence.ContinueHere}, Default: mcpfence.Acquire}, lease.Config{})
	if c := cause(call(t.Context(), b.client("desktop"), "write", "c1", "", false, nil)); c != "ok" {
		t.Errorf("with Default Acquire: %s", c)
	}
}
