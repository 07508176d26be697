package effects_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fencekit/fencekit/effects"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(relayChild())
	}
	if os.Getenv(producerEnv) != "" {
		os.Exit(producerChild())
	}
	fencetest.SkipExamplesInShort()
	goleak.VerifyTestMain(m)
}

func bg() context.Context { return context.Background() }

// env is one private schema with the lease and effects sets, and a raw
// pool for reading rows behind the package's back.
type env struct {
	t      *testing.T
	schema string
	raw    *pgxpool.Pool
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return &env{t: t, schema: fencetest.Schema(t, migrations.Lease, migrations.Effects), raw: fencetest.Pool(t)}
}

// manager is a lease Manager on its own pool.
func (e *env) manager() *lease.Manager {
	e.t.Helper()
	m, err := lease.New(lease.Config{Pool: fencetest.Pool(e.t), Schema: e.schema, TTL: 10 * time.Second})
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = m.Close() })
	return m
}

// outbox is an Outbox on its own pool with the given targets.
func (e *env) outbox(targets ...effects.Target) *effects.Outbox {
	e.t.Helper()
	o, err := effects.New(effects.Config{Pool: fencetest.Pool(e.t), Schema: e.schema, Targets: targets, AwaitPoll: 10 * time.Millisecond})
	require.NoError(e.t, err)
	return o
}

// relay starts a Relay of its own Outbox (own pool) over the same schema
// and targets; stopped at cleanup.
func (e *env) relay(targets []effects.Target, cfg effects.RelayConfig, setup ...func(*effects.Relay)) *effects.Relay {
	e.t.Helper()
	o := e.outbox(targets...)
	if cfg.Poll == 0 {
		cfg.Poll = 20 * time.Millisecond
	}
	if cfg.RetryMin == 0 {
		cfg.RetryMin, cfg.RetryMax = 10*time.Millisecond, 50*time.Millisecond
	}
	r, err := effects.NewRelay(o, cfg)
	require.NoError(e.t, err)
	for _, s := range setup {
		s(r)
	}
	require.NoError(e.t, r.Start(bg()))
	e.t.Cleanup(func() { require.NoError(e.t, r.Stop()) })
	return r
}

func (e *env) count() int {
	e.t.Helper()
	var n int
	require.NoError(e.t, e.raw.QueryRow(bg(), fmt.Sprintf(`SELECT count(*) FROM %q.fencekit_effects`, e.schema)).Scan(&n))
	return n
}

func (e *env) key() lease.Key {
	return lease.Key{AccountID: "acct-" + fencetest.RandomName(""), SessionID: "conv/1"}
}

func claimOf(t *testing.T, l *lease.Lease) fence.Claim {
	t.Helper()
	c, err := fence.ClaimFromContext(l.Context())
	require.NoError(t, err)
	return c
}

// request is one request the test target received.
type request struct {
	Key    string
	Method string
	Body   string
	Header http.Header
}

// target is an HTTP service that deduplicates on the Idempotency-Key
// header: it applies the first request of each key (applied) and answers
// later ones with the first answer, as payment APIs do. It can fail the
// next requests with 503, delay, and drop replies (close the connection
// after applying).
type target struct {
	srv     *httptest.Server
	mu      sync.Mutex
	reqs    []request
	applied map[string]int
	fail    atomic.Int32 // the next n requests get 503 (not applied)
	drop    atomic.Int32 // the next n requests are applied, then the connection is closed
	delay   atomic.Int64 // ns before answering
	seen    chan string  // each request's key, when someone listens
}

func newTarget(t *testing.T) *target {
	tg := &target{applied: map[string]int{}, seen: make(chan string, 1024)}
	tg.srv = httptest.NewServer(http.HandlerFunc(tg.serve))
	t.Cleanup(tg.srv.Close)
	return tg
}

func (tg *target) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	key := r.Header.Get("Idempotency-Key")
	tg.mu.Lock()
	tg.reqs = append(tg.reqs, request{Key: key, Method: r.Method, Body: string(body), Header: r.Header.Clone()})
	tg.mu.Unlock()
	select {
	case tg.seen <- key:
	default:
	}
	if d := tg.delay.Load(); d > 0 {
		time.Sleep(time.Duration(d)) // the target's own slowness, not a test wait
	}
	if r.URL.Path == "/missing" {
		http.Error(w, "no such thing", http.StatusNotFound)
		return
	}
	if tg.fail.Add(-1) >= 0 {
		http.Error(w, "try later", http.StatusServiceUnavailable)
		return
	}
	tg.mu.Lock()
	tg.applied[key]++
	n := tg.applied[key]
	tg.mu.Unlock()
	if tg.drop.Add(-1) >= 0 {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
		return
	}
	if n > 1 {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(http.StatusCreated)
	_, _ = fmt.Fprintf(w, "applied %s", key)
}

// requests returns the requests received with key.
func (tg *target) requests(key string) []request {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	var out []request
	for _, r := range tg.reqs {
		if r.Key == key {
			out = append(out, r)
		}
	}
	return out
}

func (tg *target) total() int {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return len(tg.reqs)
}

// effect is an HTTP effect to the target.
func (tg *target) effect(t *testing.T, requestKey, body string) effects.Effect {
	t.Helper()
	b, err := effects.HTTPRequest{Method: http.MethodPost, URL: tg.srv.URL + "/charge",
		Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(body)}.Freeze()
	require.NoError(t, err)
	return effects.Effect{Target: "pay", RequestKey: requestKey, Request: b}
}

func httpTarget(opts ...func(*effects.Target)) effects.Target {
	t := effects.Target{Name: "pay", Deliverer: &effects.HTTP{}}
	for _, o := range opts {
		o(&t)
	}
	return t
}

func uuidMust(t *testing.T, s string) uuid.UUID {
	t.Helper()
	id, err := uuid.Parse(s)
	require.NoError(t, err)
	return id
}

// eventually polls cond (a state read) until it holds or d passes.
func eventually(t *testing.T, d time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: "+msg, args...)
		}
		time.Sleep(5 * time.Millisecond) // polling a state, not timing an event
	}
}
