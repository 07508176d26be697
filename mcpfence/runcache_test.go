package mcpfence_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/mcpfence"
)

// The run cache (Config.RunCache): a replica that served a call of a run
// runs its later calls with no lease statement, told of the run's end by
// its watch of the conversation.

// parkResumes counts the park and resume statements sent through a pool.
type parkResumes struct {
	mu sync.Mutex
	n  int
}

func (p *parkResumes) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	// Lease.Park sets "manager_id = NULL, parked_run_id = l.run_id",
	// Manager.Resume sets "parked_run_id = NULL, holder = ...". The reads
	// of Inspect, List and Watch also name parked_run_id = l.run_id (as a
	// column), so only the SET clauses count: the cache's own watcher
	// polls the row.
	if strings.Contains(d.SQL, "manager_id = NULL, parked_run_id = l.run_id") || strings.Contains(d.SQL, "parked_run_id = NULL, holder") {
		p.mu.Lock()
		p.n++
		p.mu.Unlock()
	}
	return ctx
}

func (p *parkResumes) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (p *parkResumes) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// tracedPool is a new pool whose statements rec sees.
func tracedPool(t *testing.T, rec pgx.QueryTracer) *pgxpool.Pool {
	t.Helper()
	return fencetest.PoolWith(t, fencetest.DatabaseURL(), func(c *pgxpool.Config) { c.ConnConfig.Tracer = rec })
}

// eventually waits (at most within) for cond.
func eventually(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
	}
}

// claimToken is the token the tool's claim carried (the harness's tools
// return it).
func claimToken(res *mcp.CallToolResult) string {
	tok, _ := res.StructuredContent.(map[string]any)["token"].(string)
	return tok
}

// TestRunCacheSendsNoStatement: with RunCache a later call of a run on the
// replica that parked it sends no park or resume statement and runs under
// the run's token; without it each later call sends both.
func TestRunCacheSendsNoStatement(t *testing.T) {
	fencetest.SkipShort(t)
	cachedRec, plainRec := &parkResumes{}, &parkResumes{}
	a := newHarness(t, mcpfence.Config{RunCache: true}, lease.Config{Pool: tracedPool(t, cachedRec)})
	plain := a.replica(mcpfence.Config{}, lease.Config{Pool: tracedPool(t, plainRec)})
	key := lease.Key{AccountID: "acme", SessionID: "c1"}
	ca := a.client("desktop")
	run, first := startRun(t, ca, "write", "c1", nil)
	if !mcpfence.CachedRun(a.f, key, run) {
		t.Fatal("the run is not cached after its first call parked it")
	}
	before := cachedRec.count()
	for i := range 5 {
		res, err := call(t.Context(), ca, "write", "c1", run, false, nil)
		if c := cause(res, err); c != "ok" {
			t.Fatalf("cached call %d: %s", i, c)
		}
		if info := leaseInfo(t, res); info.Token != first.Token || info.Run != run || info.RunID != run || info.Holder != "desktop" {
			t.Errorf("cached call %d: %+v, want the run's %+v", i, info, first)
		}
		if tok := claimToken(res); tok != first.Token.String() {
			t.Errorf("cached call %d: the tool's claim has token %q, want %s", i, tok, first.Token)
		}
	}
	if n := cachedRec.count() - before; n != 0 {
		t.Errorf("five cached calls sent %d park or resume statements, want none", n)
	}
	if o, err := a.m.Inspect(t.Context(), key); err != nil || !o.Held() || !o.Parked || o.RunID.String() != run {
		t.Errorf("the run's row after cached calls: %+v, %v (want it parked)", o, err)
	}
	// The same later call without the cache: a resume and a park.
	before = plainRec.count()
	mustRunCall(t, "a call on the replica without the cache", plain.client("desktop"), "write", "c1", run, false)
	if n := plainRec.count() - before; n != 2 {
		t.Errorf("a later call without the cache sent %d park or resume statements, want 2", n)
	}
	// The cached replica's entry is still the run's (the other replica
	// resumed and parked it: same run, same token).
	mustRunCall(t, "a cached call after the other replica's", ca, "write", "c1", run, false)
}

// TestRunCacheTakeover: a takeover through another replica ends the cached
// calls in flight (taken over), and once the watch has delivered it, the
// cached replica refuses the run's next call as taken over.
func TestRunCacheTakeover(t *testing.T) {
	a := newHarness(t, mcpfence.Config{RunCache: true}, lease.Config{})
	b := a.replica(mcpfence.Config{}, lease.Config{})
	key := lease.Key{AccountID: "acme", SessionID: "c1"}
	ca := a.client("desktop")
	run, first := startRun(t, ca, "write", "c1", nil)

	held := make(chan string, 1)
	go func() {
		held <- cause(call(t.Context(), ca, "write", "c1", run, false, map[string]any{"hold": true}))
	}()
	eventually(t, "the held call runs", 5*time.Second, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.active["c1"] == 1
	})
	if o, err := a.m.Inspect(t.Context(), key); err != nil || !o.Parked {
		t.Fatalf("the run while a cached call runs: %+v, %v (want it parked: no resume)", o, err)
	}
	res, err := call(t.Context(), b.client("browser"), "take", "c1", "", false, nil)
	if c := cause(res, err); c != "ok" {
		t.Fatalf("the takeover: %s", c)
	}
	if took := leaseInfo(t, res); took.Token <= first.Token {
		t.Errorf("the takeover's token %d, the run's %d", took.Token, first.Token)
	}
	select {
	case c := <-held:
		if c != mcpfence.CauseTakenOver {
			t.Errorf("the cached call in flight: %s, want %s", c, mcpfence.CauseTakenOver)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cached call in flight did not end after the takeover")
	}
	eventually(t, "the entry is dropped", 10*time.Second, func() bool { return !mcpfence.CachedRun(a.f, key, run) })
	if c := cause(call(t.Context(), ca, "write", "c1", run, false, nil)); c != mcpfence.CauseTakenOver {
		t.Errorf("the displaced run's next call on the cached replica: %s", c)
	}
	if n := a.calls.Load(); n != 2 {
		t.Errorf("the tool ran %d times on a, want 2 (the first call and the held one)", n)
	}
}

// TestRunCacheTakeoverHere: a takeover through the cached replica's own
// Fence drops the entry at once.
func TestRunCacheTakeoverHere(t *testing.T) {
	a := newHarness(t, mcpfence.Config{RunCache: true}, lease.Config{})
	key := lease.Key{AccountID: "acme", SessionID: "c1"}
	run, _ := startRun(t, a.client("desktop"), "write", "c1", nil)
	if c := cause(call(t.Context(), a.client("browser"), "take", "c1", "", false, nil)); c != "ok" {
		t.Fatalf("the takeover: %s", c)
	}
	if mcpfence.CachedRun(a.f, key, run) {
		t.Error("the displaced run is still cached after a takeover through the same Fence")
	}
	if c := cause(call(t.Context(), a.client("desktop"), "write", "c1", run, false, nil)); c != mcpfence.CauseTakenOver {
		t.Errorf("the displaced run's next call: %s", c)
	}
}

// TestRunCacheRunEndElsewhere: run_end on another replica ends the run on
// the cached replica once its watch has delivered the release.
func TestRunCacheRunEndElsewhere(t *testing.T) {
	a := newHarness(t, mcpfence.Config{RunCache: true}, lease.Config{})
	b := a.replica(mcpfence.Config{RunCache: true}, lease.Config{})
	key := lease.Key{AccountID: "acme", SessionID: "c1"}
	ca := a.client("desktop")
	run, _ := startRun(t, ca, "write", "c1", nil)
	mustRunCall(t, "a cached call", ca, "write", "c1", run, false)
	mustRunCall(t, "run_end on b", b.client("desktop"), "write", "c1", run, true)
	if mcpfence.CachedRun(b.f, key, run) {
		t.Error("b cached the run it ended")
	}
	eventually(t, "a drops the ended run", 10*time.Second, func() bool { return !mcpfence.CachedRun(a.f, key, run) })
	if c := cause(call(t.Context(), ca, "write", "c1", run, false, nil)); c != mcpfence.CauseRunEnded {
		t.Errorf("the ended run's call on a: %s", c)
	}
	// run_end on the cached replica itself drops its entry at once.
	run2, _ := startRun(t, ca, "write", "c1", nil)
	mustRunCall(t, "run_end on a", ca, "write", "c1", run2, true)
	if mcpfence.CachedRun(a.f, key, run2) {
		t.Error("a still caches the run it ended")
	}
	if o, err := a.m.Inspect(t.Context(), key); err != nil || o.State != lease.StateReleased {
		t.Errorf("after run_end on a: %v, %v", o.State, err)
	}
}

// TestRunCacheIdleClock: cached calls keep the run alive past RunIdle (the
// cache extends its parked expiry in the background), and after the last
// call the run ends between RunIdle and about 1.1×RunIdle later.
func TestRunCacheIdleClock(t *testing.T) {
	const idle = time.Second
	a := newHarness(t, mcpfence.Config{RunCache: true, RunIdle: idle}, lease.Config{})
	b := a.replica(mcpfence.Config{RunIdle: idle}, lease.Config{})
	key := lease.Key{AccountID: "acme", SessionID: "c1"}
	ca := a.client("desktop")
	run, first := startRun(t, ca, "write", "c1", nil)
	start := time.Now()
	var last time.Time
	for time.Since(start) < 3*idle {
		time.Sleep(idle / 5)
		info := mustRunCall(t, fmt.Sprintf("a call %s after the run started", time.Since(start).Round(time.Millisecond)), ca, "write", "c1", run, false)
		if info.Token != first.Token {
			t.Fatalf("token %d, the run's %d", info.Token, first.Token)
		}
		last = time.Now()
	}
	if !mcpfence.CachedRun(a.f, key, run) {
		t.Error("the run is no longer cached while its calls come")
	}
	o := waitNotHeld(t, b.m, key, 10*idle)
	ended := time.Since(last)
	if o.RunID.String() != run || o.State != lease.StateExpired {
		t.Errorf("the idle run's row: %+v (want the run's, expired)", o)
	}
	// The row expires RunIdle after the last park, which is at most
	// RunIdle/10 after the last call; the bounds are generous for a loaded
	// machine (the expiry is seen by polling).
	if ended < idle-50*time.Millisecond || ended > idle+idle/10+time.Second {
		t.Errorf("the run ended %s after its last call, want between %s and about %s", ended, idle, idle+idle/10)
	}
	eventually(t, "the expired run is dropped", 5*time.Second, func() bool { return !mcpfence.CachedRun(a.f, key, run) })
	if c := cause(call(t.Context(), ca, "write", "c1", run, false, nil)); c != mcpfence.CauseRunEnded {
		t.Errorf("the idle run's call: %s", c)
	}
}

// TestRunCacheCloseStops: Close stops every cached run's watcher and clock.
func TestRunCacheCloseStops(t *testing.T) {
	a := newHarness(t, mcpfence.Config{RunCache: true}, lease.Config{})
	ca := a.client("desktop")
	for _, conv := range []string{"c1", "c2", "c3"} {
		run, _ := startRun(t, ca, "write", conv, nil)
		mustRunCall(t, "a cached call", ca, "write", conv, run, false)
	}
	if n := mcpfence.CachedRuns(a.f); n != 3 {
		t.Fatalf("%d cached runs, want 3", n)
	}
	if g := cacheGoroutines(); g == 0 {
		t.Fatal("no goroutine of the run cache found while runs are cached")
	}
	key := lease.Key{AccountID: "acme", SessionID: "c1"}
	parked, err := a.m.Inspect(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if err := a.f.Close(); err != nil {
		t.Fatal(err)
	}
	if n := mcpfence.CachedRuns(a.f); n != 0 {
		t.Errorf("%d cached runs after Close", n)
	}
	// Close waits for them to finish (their WaitGroup); each is gone from
	// the stacks a moment later, once its deferred Done has returned.
	eventually(t, "no goroutine of the run cache after Close", 2*time.Second, func() bool { return cacheGoroutines() == 0 })
	// The runs outlive Close: parked in the database, resumed elsewhere;
	// a run with cached calls since its last park was parked again.
	o, err := a.m.Inspect(t.Context(), key)
	if err != nil || !o.Held() || !o.Parked || o.RunID != parked.RunID {
		t.Errorf("a run after Close: %+v, %v (want it parked)", o, err)
	}
	if !o.ExpiresAt.After(parked.ExpiresAt) {
		t.Errorf("the run's parked expiry after Close: %s, before %s (want it extended)", o.ExpiresAt, parked.ExpiresAt)
	}
}

// cacheGoroutines counts the goroutines of run cache entries.
func cacheGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "mcpfence.(*Fence).watchRun") || strings.Contains(g, "mcpfence.(*Fence).runClock") {
			n++
		}
	}
	return n
}
