package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/mcpfence"
	"github.com/fencekit/fencekit/sql/migrations"
)

// proxiedCall is one tools/call the proxy passed on.
type proxiedCall struct {
	backend  int
	client   string // the request's client info name
	tool     string
	run      string // "start", a handle, or ""
	revision string // the Mcp-Protocol-Version header
	session  string // the Mcp-Session-Id header
}

// proxiedSession is a 2025-11-25 MCP session the proxy saw initialized.
type proxiedSession struct {
	backend int
	client  string // the initialize request's client info name
}

// runProxy is a round-robin reverse proxy (httputil.ReverseProxy) in front
// of replicas, with one twist: a call of a run (_meta io.fencekit/run_start
// or io.fencekit/run) goes to the replica that did not serve the previous
// call of a run of the same client in the same conversation, so that every
// later call of a run lands on the other replica. Other requests go round
// robin.
//
// With sticky set (for 2025-11-25, whose MCP session lives in the memory of
// the replica that served initialize) a request with an Mcp-Session-Id goes
// to the replica that issued it, and requests without one go round robin.
type runProxy struct {
	backends []*url.URL
	sticky   bool
	sessions map[string]proxiedSession // Mcp-Session-Id -> who initialized it, where

	mu    sync.Mutex
	next  int
	last  map[string]int // conversation + client -> the backend of its last run call
	calls []proxiedCall
}

func (p *runProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body []byte
	if r.Body != nil {
		var err error
		if body, err = io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	var msg struct {
		Method string `json:"method"`
		Params struct {
			Name       string         `json:"name"`
			Meta       map[string]any `json:"_meta"`
			ClientInfo struct {
				Name string `json:"name"`
			} `json:"clientInfo"`
		} `json:"params"`
	}
	_ = json.Unmarshal(body, &msg) // a batch or no body: not a tools/call
	p.mu.Lock()
	b := p.next % len(p.backends)
	sid := r.Header.Get("Mcp-Session-Id")
	if sb, ok := p.sessions[sid]; p.sticky && ok {
		b = sb.backend
	} else {
		p.next++
	}
	if msg.Method == "tools/call" {
		m := msg.Params.Meta
		c := proxiedCall{tool: msg.Params.Name, revision: r.Header.Get("Mcp-Protocol-Version"), session: sid, client: p.sessions[sid].client}
		if ci, ok := m[mcp.MetaKeyClientInfo].(map[string]any); ok {
			c.client, _ = ci["name"].(string)
		}
		if v, _ := m[mcpfence.MetaRunStart].(bool); v {
			c.run = "start"
		} else if h, ok := m[mcpfence.MetaRun].(string); ok {
			c.run = h
		}
		if c.run != "" && !p.sticky {
			conv, _ := m[mcpfence.MetaConversation].(string)
			k := conv + "\x00" + c.client
			if prev, ok := p.last[k]; ok && c.run != "start" {
				b = (prev + 1) % len(p.backends)
			}
			p.last[k] = b
		}
		c.backend = b
		p.calls = append(p.calls, c)
	}
	p.mu.Unlock()
	target := p.backends[b]
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target) }, FlushInterval: -1,
		ModifyResponse: func(res *http.Response) error {
			if id := res.Header.Get("Mcp-Session-Id"); id != "" && msg.Method == "initialize" {
				p.mu.Lock()
				p.sessions[id] = proxiedSession{backend: b, client: msg.Params.ClientInfo.Name}
				p.mu.Unlock()
			}
			return nil
		}}
	rp.ServeHTTP(w, r)
}

// TestReplicasTypeScriptV2 has the TypeScript SDK v2 client
// (@modelcontextprotocol/client, pinned in interop/package-lock.json,
// installed with npm ci) drive the fenced scenarios on protocol revision
// 2026-07-28 against two replicas of the server (each its own pool, lease
// Manager and Fence, sharing the database and the file directory) behind a
// round-robin proxy that sends each later call of a run to the other
// replica (interop/replicas.mjs): two devices, a run continuing across
// replicas under one token, the displaced run's late write refused stale,
// its next call refused taken_over. The same client and scenario run on
// 2025-11-25 too, whose MCP session lives in the replica that served
// initialize (round robin would send its requests to the other replica:
// 404 "session not found"): there the proxy routes by Mcp-Session-Id, so
// each device stays on one replica, the two devices on different ones.
// Node and npm are required under CI=true.
func TestReplicasTypeScriptV2(t *testing.T) {
	for _, revision := range []string{mcpfence.Revision20260728, "2025-11-25"} {
		t.Run(revision, func(t *testing.T) { replicasTypeScriptV2(t, revision) })
	}
}

func replicasTypeScriptV2(t *testing.T, revision string) {
	nodeDeps(t)
	ctx := t.Context()
	e := &env{schema: fencetest.Schema(t, migrations.Lease, migrations.Guard), dir: t.TempDir(), pool: fencetest.Pool(t)}
	stateless := revision >= mcpfence.Revision20260728
	p := &runProxy{last: map[string]int{}, sticky: !stateless, sessions: map[string]proxiedSession{}}
	for i := range 2 {
		notes, err := NewNotes(ctx, fencetest.Pool(t), Options{Schema: e.schema, Dir: e.dir,
			Members: map[string][]string{"alice": {"acme"}}})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(notes.HTTPHandler())
		t.Cleanup(func() {
			srv.Close()
			if err := notes.Close(); err != nil {
				t.Errorf("replica %d: %v", i, err)
			}
		})
		u, err := url.Parse(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		p.backends = append(p.backends, u)
	}
	proxy := httptest.NewServer(p)
	t.Cleanup(proxy.Close)

	conv := "v2-" + uuid.NewString()[:8]
	nctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	runNode(nctx, t, "replicas.mjs", proxy.URL+"/mcp", conv, revision)

	want := map[string]int{"v2 draft": 1, "v2 second": 1, "v2 final": 1, "v2 last": 1}
	if b := bodies(t, e, conv); fmt.Sprint(b) != fmt.Sprint(want) {
		t.Errorf("stored notes %v, want %v", b, want)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	runs := map[string][]int{} // client -> backends of its run calls, in order
	served := map[int]int{}
	var log []string
	for _, c := range p.calls {
		log = append(log, fmt.Sprintf("%s %s run=%q -> replica %d (%s)", c.client, c.tool, c.run, c.backend, c.revision))
		served[c.backend]++
		if c.revision != revision || stateless != (c.session == "") {
			t.Errorf("a tools/call on revision %q with session %q: want %s (stateless: %v)", c.revision, c.session, revision, stateless)
		}
		if c.run != "" {
			runs[c.client] = append(runs[c.client], c.backend)
		}
	}
	t.Logf("tools/call through the proxy:\n%s", strings.Join(log, "\n"))
	if served[0] == 0 || served[1] == 0 {
		t.Errorf("tools/calls per replica %v: want both", served)
	}
	if len(runs["desktop"]) < 4 || len(runs["browser"]) < 2 {
		t.Errorf("run calls %v: want at least 4 of the desktop's and 2 of the browser's", runs)
	}
	for client, bs := range runs {
		for i := 1; i < len(bs); i++ {
			if stateless && bs[i] == bs[i-1] {
				t.Errorf("%s: run calls %d and %d on the same replica %d", client, i-1, i, bs[i])
			}
			if !stateless && bs[i] != bs[0] {
				t.Errorf("%s: run call %d on replica %d, its session's is %d", client, i, bs[i], bs[0])
			}
		}
	}
	if !stateless && len(runs["desktop"]) > 0 && len(runs["browser"]) > 0 && runs["desktop"][0] == runs["browser"][0] {
		t.Errorf("both devices' sessions on replica %d: want one on each", runs["desktop"][0])
	}
}
