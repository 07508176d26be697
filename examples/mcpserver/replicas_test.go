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
