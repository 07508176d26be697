package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// replicaSet is n replicas of the notes server (each its own NewNotes: its
// own lease.Manager and Fence, over one PostgreSQL schema and one fileguard
// directory, each on its own listener) behind a round-robin reverse proxy.
type replicaSet struct {
	e       *env
	proxy   *httptest.Server
	balance *roundRobin
}

// startReplicas starts n replicas and the proxy; they stop when the test
// ends.
func startReplicas(t *testing.T, n int) *replicaSet {
	t.Helper()
	e := &env{schema: fencetest.Schema(t, migrations.Lease, migrations.Guard), dir: t.TempDir(), pool: fencetest.Pool(t)}
	rr := &roundRobin{sessions: map[string]int{}, hits: make([]atomic.Int64, n)}
	for i := range n {
		notes, err := NewNotes(t.Context(), e.pool, Options{Schema: e.schema, Dir: e.dir,
			Members: map[string][]string{"alice": {"acme"}, "mallory": {"other"}}})
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
		u, err := url.Parse(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		p := httputil.NewSingleHostReverseProxy(u)
		p.FlushInterval = -1 // SSE: every event at once
		p.ModifyResponse = func(res *http.Response) error {
			res.Header.Set("X-Replica", strconv.Itoa(i))
			if id := res.Header.Get("Mcp-Session-Id"); id != "" {
				rr.mu.Lock()
				rr.sessions[id] = i
				rr.mu.Unlock()
			}
			return nil
		}
		rr.backends = append(rr.backends, p)
	}
	proxy := httptest.NewServer(rr)
	t.Cleanup(proxy.Close)
	return &replicaSet{e: e, proxy: proxy, balance: rr}
}

// roundRobin sends each HTTP request to the next replica in turn, as a load
// balancer without affinity does; only a request of a 2025-11-25 MCP session
// (Mcp-Session-Id), which lives in the replica that created it, goes to that
// replica. Each response names its replica in the X-Replica header.
type roundRobin struct {
	backends []*httputil.ReverseProxy
	next     atomic.Uint64
	hits     []atomic.Int64 // HTTP requests per replica

	mu       sync.Mutex
	sessions map[string]int // Mcp-Session-Id -> replica
}

func (rr *roundRobin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	i := -1
	if id := r.Header.Get("Mcp-Session-Id"); id != "" {
		rr.mu.Lock()
		if b, ok := rr.sessions[id]; ok {
			i = b
		}
		rr.mu.Unlock()
	}
	if i < 0 {
		i = int((rr.next.Add(1) - 1) % uint64(len(rr.backends)))
	}
	rr.hits[i].Add(1)
	rr.backends[i].ServeHTTP(w, r)
}

// replicasOfSessions returns the replica of each MCP session seen.
func (rr *roundRobin) replicasOfSessions() map[int]int {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	out := map[int]int{}
	for _, i := range rr.sessions {
		out[i]++
	}
	return out
}

func (rs *replicaSet) requireEveryReplicaServed(t *testing.T) {
	t.Helper()
	for i := range rs.balance.hits {
		if n := rs.balance.hits[i].Load(); n == 0 {
			t.Errorf("replica %d served no request", i)
		} else {
			t.Logf("replica %d served %d HTTP requests", i, n)
		}
	}
}

// TestReplicasTypeScriptV2: the two-devices scenario on MCP 2026-07-28
// (stateless: no initialize, no session), the official TypeScript SDK v2
// client (@modelcontextprotocol/client, interop/scenario-v2.mjs) against two
// replicas behind a round-robin proxy: a run started on one replica goes on
// on the other with the handle the server minted, a duplicate call is
// answered once, continue here on one replica ends the run held through the
// other, and the stored notes are exactly the accepted ones.
func TestReplicasTypeScriptV2(t *testing.T) {
	nodeDeps(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	rs := startReplicas(t, 2)
	conv := "v2-" + uuid.NewString()[:8]
	runNode(ctx, t, "scenario-v2.mjs", rs.proxy.URL+"/mcp", conv)

	want := map[string]int{"v2 draft": 1, "v2 second": 1, "v2 third": 1, "v2 once": 1, "v2 final": 1, "v2 last": 1}
	if b := bodies(t, rs.e, conv); fmt.Sprint(b) != fmt.Sprint(want) {
		t.Errorf("stored notes %v, want %v", b, want)
	}
	if o := inspect(t, rs.e, lease.Key{AccountID: "acme", SessionID: conv}); o.State != lease.StateReleased || o.Holder != "browser" {
		t.Errorf("after the browser's run_end: %v by %q, want released by the browser", o.State, o.Holder)
	}
	if s := rs.balance.replicasOfSessions(); len(s) != 0 {
		t.Errorf("2026-07-28 traffic created MCP sessions on replicas %v", s)
	}
	rs.requireEveryReplicaServed(t)
}

// TestReplicasTypeScript1x: the same two-devices scenario with the 1.x
// TypeScript SDK (@modelcontextprotocol/sdk, interop/scenario.mjs) on
// 2025-11-25, whose sessions each live on one replica (the proxy keeps a
// session's requests there): the desktop's session on one replica, the
// browser's on the other; continue here through the browser's replica ends
// the run held through the desktop's.
func TestReplicasTypeScript1x(t *testing.T) {
	nodeDeps(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	rs := startReplicas(t, 2)
	conv := "ts1-" + uuid.NewString()[:8]
	runNode(ctx, t, "scenario.mjs", rs.proxy.URL+"/mcp", conv)

	want := map[string]int{"ts draft": 1, "ts final": 1, "ts last": 1}
	if b := bodies(t, rs.e, conv); fmt.Sprint(b) != fmt.Sprint(want) {
		t.Errorf("stored notes %v, want %v", b, want)
	}
	if o := inspect(t, rs.e, lease.Key{AccountID: "acme", SessionID: conv}); o.State != lease.StateReleased || o.Holder != "browser" {
		t.Errorf("after the browser's run_end: %v by %q, want released by the browser", o.State, o.Holder)
	}
	// desktop, browser, mallory: sessions on both replicas.
	if s := rs.balance.replicasOfSessions(); len(s) != 2 {
		t.Errorf("MCP sessions per replica %v, want sessions on both", s)
	}
	rs.requireEveryReplicaServed(t)
}

// TestReplicasAbortedWaitNeverWrites: a device that leaves mid-call never
// writes. On MCP 2026-07-28 (TypeScript SDK v2, interop/scenario-abort.mjs,
// two replicas behind the round-robin proxy) the browser holds the
// conversation in a run; the desktop's queue_note (Wait) waits its turn
// and the desktop aborts it; then the browser ends its run. For a few
// seconds after that release the abandoned call must neither obtain the
// lease nor write its note.
func TestReplicasAbortedWaitNeverWrites(t *testing.T) {
	nodeDeps(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	rs := startReplicas(t, 2)
	conv := "abort-" + uuid.NewString()[:8]
	key := lease.Key{AccountID: "acme", SessionID: conv}
	m, err := lease.New(lease.Config{Pool: rs.e.pool, Schema: rs.e.schema})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close() //nolint:errcheck // holds nothing
	w, err := m.Watch(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	runNode(ctx, t, "scenario-abort.mjs", rs.proxy.URL+"/mcp", conv)

	// Every change of the conversation's lease, from before the browser's
	// run to 3 s after its release: a waiter that outlived its client would
	// obtain the lease (a grant to the desktop) within its polling interval
	// once the browser released it, and then write.
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Second)
	defer wcancel()
	for {
		ev, err := w.Next(wctx)
		if err != nil {
			if wctx.Err() == nil {
				t.Fatalf("watching the lease: %v", err)
			}
			break
		}
		t.Logf("lease event %v: %v by %q, token %d", ev.Kind, ev.State, ev.Holder, ev.Token)
		if ev.Holder == "desktop" {
			t.Errorf("the aborted call obtained the lease: %v by %q, token %d", ev.State, ev.Holder, ev.Token)
		}
	}
	want := map[string]int{"abort held": 1, "abort released": 1}
	if b := bodies(t, rs.e, conv); fmt.Sprint(b) != fmt.Sprint(want) {
		t.Errorf("stored notes %v, want %v", b, want)
	}
	if o := inspect(t, rs.e, key); o.Holder != "browser" || o.State != lease.StateReleased {
		t.Errorf("lease %v by %q, want released by the browser", o.State, o.Holder)
	}
}
