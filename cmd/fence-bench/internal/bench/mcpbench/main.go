package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fencekit/fencekit/cmd/fence-bench/internal/bench"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/mcpfence"
	"github.com/fencekit/fencekit/sql/migrations"
)

func main() {
	bench.DBCase("mcpbench", "mcp_call", bench.MCPCallKeys, "rounds of one call per side", run)
}

// The sides, in the order of their columns. Every side calls the same
// handler doing the same guarded write; the first seven speak MCP
// 2025-11-25 (the Go SDK's client pinned to it: one MCP session), the
// last six 2026-07-28 (the same client unpinned: stateless requests, no
// session), all through one mcpfence.HTTPHandler.
const (
	sideUnfenced = iota
	sideFloor
	sideFloorAfter
	sideFenced
	sideRun
	sideRunCached
	sideBeforeReply
	sideUnfenced26
	sideFloor26
	sideFloorAfter26
	sideFenced26
	sideRun26
	sideRunCached26
	nSides
)

var sideNames = [nSides]string{
	"2025-11-25 unfenced (same guarded write)", "2025-11-25 floor (+1 durable commit, no lease)",
	"2025-11-25 floor, +1 commit after (no lease)", "2025-11-25 fenced per call",
	"2025-11-25 fenced, later call of a run", "2025-11-25 fenced, later call of a run, RunCache", "2025-11-25 fenced, release before reply",
	"2026-07-28 unfenced (same guarded write)", "2026-07-28 floor (+1 durable commit, no lease)",
	"2026-07-28 floor, +1 commit after (no lease)", "2026-07-28 fenced per call",
	"2026-07-28 fenced, later call of a run", "2026-07-28 fenced, later call of a run, RunCache",
}

// timing is what the server measured of the last call (calls are
// sequential): its whole time in the server and the guarded write's.
type timing struct {
	server, write atomic.Int64 // ns
}

// benchServer is one MCP server over streamable HTTP with the bench's tools.
type benchServer struct {
	url  string
	srv  *http.Server
	last *timing
}

func run(e *bench.Env, dbURL string, rounds int, log io.Writer) (err error) {
	ctx := e.Ctx
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	schema := "fencebench_mcp_" + hex.EncodeToString(rb[:])
	if _, err := migrations.Migrate(ctx, pool, migrations.Options{Schema: schema}, migrations.Lease, migrations.Guard); err != nil {
		return err
	}
	defer func() {
		_, derr := pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		err = errors.Join(err, derr)
	}()
	table := pgx.Identifier{schema, "notes"}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+table+" (id bigserial PRIMARY KEY, conversation text NOT NULL, body text NOT NULL, token bigint NOT NULL)"); err != nil {
		return err
	}
	// The floor's own durable commit: one UPSERT of a row per conversation,
	// the shape of a lease grant, committed on its own before the write.
	floorTable := pgx.Identifier{schema, "floor"}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+floorTable+" (conversation text PRIMARY KEY, n bigint NOT NULL)"); err != nil {
		return err
	}
	floorUpsert := "INSERT INTO " + floorTable + " AS f (conversation, n) VALUES ($1, 1) ON CONFLICT (conversation) DO UPDATE SET n = f.n + 1"
	// The floor with a commit after: the floor's UPSERT, the write, and
	// one more durable commit of the tool's own (an UPDATE of the same
	// row, the shape of a release) sent in the background as the handler
	// returns, the result not waiting for it: what a per-call fenced call
	// does (mcpfence releases the lease so). As mcpfence does, a later
	// call of the conversation waits for it before its own first commit.
	floorAfter := "UPDATE " + floorTable + " SET n = n + 1 WHERE conversation = $1"
	var (
		afterMu sync.Mutex
		after   = map[string]chan struct{}{} // a conversation's commit after, in flight
		afterWG sync.WaitGroup
	)
	defer afterWG.Wait()
	m, err := lease.New(lease.Config{Pool: pool, Schema: schema})
	if err != nil {
		return err
	}
	defer m.Close() //nolint:errcheck // bench teardown
	g, err := pgguard.New(pgguard.Config{DB: pool, Schema: schema})
	if err != nil {
		return err
	}
	insert := "INSERT INTO " + table + " (conversation, body, token) VALUES ($1, $2, $3)"
	fixed := fence.Claim{Token: 1, Run: uuid.NewString()}

	newServer := func(releaseBeforeReply, runCache bool) (*benchServer, *mcpfence.Fence, error) {
		f, err := mcpfence.New(mcpfence.Config{Manager: m, Account: mcpfence.Fixed("bench"), ReleaseBeforeReply: releaseBeforeReply, RunCache: runCache,
			Tools: map[string]mcpfence.Policy{"note_unfenced": mcpfence.Unfenced, "note_floor": mcpfence.Unfenced, "note_floor_after": mcpfence.Unfenced, "note": mcpfence.Acquire}})
		if err != nil {
			return nil, nil, err
		}
		b := &benchServer{last: &timing{}}
		s := mcp.NewServer(&mcp.Implementation{Name: "bench", Version: "v0"}, nil)
		s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
			return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
				t0 := time.Now()
				res, err := next(ctx, method, req)
				if method == "tools/call" {
					b.last.server.Store(int64(time.Since(t0)))
				}
				return res, err
			}
		}, f.Middleware)
		type in struct {
			Text string `json:"text"`
		}
		type out struct {
			OK bool `json:"ok"`
		}
		// One handler for every tool: the unfenced tools' ctx carries no
		// claim, and the handler writes under a fixed claim of its own;
		// the floor tools first commit one UPSERT of their own, and the
		// floor-after tool one more commit as it returns.
		note := func(floor, commitAfter bool) mcp.ToolHandlerFor[in, out] {
			return func(ctx context.Context, req *mcp.CallToolRequest, a in) (*mcp.CallToolResult, out, error) {
				conv, _ := req.Params.Meta[mcpfence.MetaConversation].(string)
				key := lease.Key{AccountID: "bench", SessionID: conv}
				if commitAfter {
					afterMu.Lock()
					pending := after[conv]
					afterMu.Unlock()
					if pending != nil {
						<-pending
					}
					done := make(chan struct{})
					afterMu.Lock()
					after[conv] = done
					afterMu.Unlock()
					afterWG.Add(1)
					defer func() {
						go func() {
							defer afterWG.Done()
							defer close(done)
							actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
							defer cancel()
							_, _ = pool.Exec(actx, floorAfter, conv)
						}()
					}()
				}
				if floor {
					if _, err := pool.Exec(ctx, floorUpsert, conv); err != nil {
						return nil, out{}, err
					}
				}
				c, cerr := fence.ClaimFromContext(ctx)
				if cerr != nil {
					c = fixed
					c.Scope = key.Scope()
					ctx = fence.WithClaim(ctx, c)
				}
				t0 := time.Now()
				err := g.InTx(ctx, key.Resource("notes"), func(ctx context.Context, tx pgx.Tx) error {
					_, err := tx.Exec(ctx, insert, conv, a.Text, int64(c.Token))
					return err
				})
				b.last.write.Store(int64(time.Since(t0)))
				return nil, out{OK: err == nil}, err
			}
		}
		mcp.AddTool(s, &mcp.Tool{Name: "note_unfenced"}, note(false, false))
		mcp.AddTool(s, &mcp.Tool{Name: "note_floor"}, note(true, false))
		mcp.AddTool(s, &mcp.Tool{Name: "note_floor_after"}, note(true, true))
		mcp.AddTool(s, &mcp.Tool{Name: "note"}, note(false, false))
		ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
		if err != nil {
			return nil, nil, err
		}
		b.url = "http://" + ln.Addr().String()
		b.srv = &http.Server{Handler: f.HTTPHandler(func(*http.Request) *mcp.Server { return s }, nil), ReadHeaderTimeout: 10 * time.Second}
		go b.srv.Serve(ln) //nolint:errcheck // ends with Close
		return b, f, nil
	}
	main, fMain, err := newServer(false, false)
	if err != nil {
		return err
	}
	defer fMain.Close()    //nolint:errcheck // bench teardown
	defer main.srv.Close() //nolint:errcheck // bench teardown
	waiting, fWaiting, err := newServer(true, false)
	if err != nil {
		return err
	}
	defer fWaiting.Close()    //nolint:errcheck // bench teardown
	defer waiting.srv.Close() //nolint:errcheck // bench teardown
	cached, fCached, err := newServer(false, true)
	if err != nil {
		return err
	}
	defer fCached.Close()    //nolint:errcheck // bench teardown
	defer cached.srv.Close() //nolint:errcheck // bench teardown
	// The Go SDK's client speaks 2026-07-28 unless pinned to an older
	// revision.
	connect := func(url, revision string) (*mcp.ClientSession, error) {
		return mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "v0"}, nil).
			Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, &mcp.ClientSessionOptions{ProtocolVersion: revision})
	}
	csMain, err := connect(main.url, "2025-11-25")
	if err != nil {
		return err
	}
	defer csMain.Close() //nolint:errcheck // bench teardown
	csWaiting, err := connect(waiting.url, "2025-11-25")
	if err != nil {
		return err
	}
	defer csWaiting.Close() //nolint:errcheck // bench teardown
	csCached, err := connect(cached.url, "2025-11-25")
	if err != nil {
		return err
	}
	defer csCached.Close() //nolint:errcheck // bench teardown
	cs26, err := connect(main.url, mcpfence.Revision20260728)
	if err != nil {
		return err
	}
	defer cs26.Close() //nolint:errcheck // bench teardown
	cs26Cached, err := connect(cached.url, mcpfence.Revision20260728)
	if err != nil {
		return err
	}
	defer cs26Cached.Close() //nolint:errcheck // bench teardown

	id := hex.EncodeToString(rb[:])
	// The run's first call starts it (MetaRunStart); its result names the
	// handle every later call presents (MetaRun).
	startRun := func(cs *mcp.ClientSession, conv string) (string, error) {
		first, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "note", Arguments: map[string]any{"text": "start"},
			Meta: mcp.Meta{mcpfence.MetaConversation: conv, mcpfence.MetaRunStart: true}})
		if err != nil {
			return "", err
		}
		info, _ := first.Meta[mcpfence.MetaLease].(map[string]any)
		runID, _ := info["run"].(string)
		if first.IsError || runID == "" {
			b, _ := json.Marshal(first)
			return "", fmt.Errorf("the run's first call named no handle: %s", b)
		}
		return runID, nil
	}
	runID, err := startRun(csMain, "r-"+id)
	if err != nil {
		return err
	}
	// The cached run's later calls reach the server that parked it.
	cachedRunID, err := startRun(csCached, "rc-"+id)
	if err != nil {
		return err
	}
	runID26, err := startRun(cs26, "r26-"+id)
	if err != nil {
		return err
	}
	cachedRunID26, err := startRun(cs26Cached, "rc26-"+id)
	if err != nil {
		return err
	}
	type call struct {
		cs   *mcp.ClientSession
		srv  *benchServer
		tool string
		meta mcp.Meta
	}
	calls := [nSides]call{
		sideUnfenced:     {csMain, main, "note_unfenced", mcp.Meta{mcpfence.MetaConversation: "u-" + id}},
		sideFloor:        {csMain, main, "note_floor", mcp.Meta{mcpfence.MetaConversation: "l-" + id}},
		sideFloorAfter:   {csMain, main, "note_floor_after", mcp.Meta{mcpfence.MetaConversation: "la-" + id}},
		sideFenced:       {csMain, main, "note", mcp.Meta{mcpfence.MetaConversation: "f-" + id}},
		sideRun:          {csMain, main, "note", mcp.Meta{mcpfence.MetaConversation: "r-" + id, mcpfence.MetaRun: runID}},
		sideRunCached:    {csCached, cached, "note", mcp.Meta{mcpfence.MetaConversation: "rc-" + id, mcpfence.MetaRun: cachedRunID}},
		sideBeforeReply:  {csWaiting, waiting, "note", mcp.Meta{mcpfence.MetaConversation: "w-" + id}},
		sideUnfenced26:   {cs26, main, "note_unfenced", mcp.Meta{mcpfence.MetaConversation: "u26-" + id}},
		sideFloor26:      {cs26, main, "note_floor", mcp.Meta{mcpfence.MetaConversation: "l26-" + id}},
		sideFloorAfter26: {cs26, main, "note_floor_after", mcp.Meta{mcpfence.MetaConversation: "la26-" + id}},
		sideFenced26:     {cs26, main, "note", mcp.Meta{mcpfence.MetaConversation: "f26-" + id}},
		sideRun26:        {cs26, main, "note", mcp.Meta{mcpfence.MetaConversation: "r26-" + id, mcpfence.MetaRun: runID26}},
		sideRunCached26:  {cs26Cached, cached, "note", mcp.Meta{mcpfence.MetaConversation: "rc26-" + id, mcpfence.MetaRun: cachedRunID26}},
	}
	one := func(k int) (total, server, write time.Duration, err error) {
		c := calls[k]
		t0 := time.Now()
		res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: c.tool, Meta: c.meta, Arguments: map[string]any{"text": "x"}})
		if err == nil && res.IsError {
			b, _ := json.Marshal(res)
			err = fmt.Errorf("tool error: %s", b)
		}
		total = time.Since(t0)
		if err != nil {
			err = fmt.Errorf("%s: %w", sideNames[k], err)
		}
		return total, time.Duration(c.srv.last.server.Load()), time.Duration(c.srv.last.write.Load()), err
	}
	// Warm-up.
	for range 30 {
		for k := range nSides {
			if _, _, _, err := one(k); err != nil {
				return err
			}
		}
	}
	var total, server, write [nSides][]time.Duration
	for r := range rounds {
		for _, k := range bench.Shuffled(r, nSides) {
			t, s, w, err := one(k)
			if err != nil {
				return fmt.Errorf("round %d: %w", r, err)
			}
			total[k], server[k], write[k] = append(total[k], t), append(server[k], s), append(write[k], w)
		}
	}
	for _, r := range []struct {
		cs        *mcp.ClientSession
		conv, run string
	}{{csMain, "r-" + id, runID}, {csCached, "rc-" + id, cachedRunID}} {
		if _, err := r.cs.CallTool(ctx, &mcp.CallToolParams{Name: "note", Arguments: map[string]any{"text": "end"},
			Meta: mcp.Meta{mcpfence.MetaConversation: r.conv, mcpfence.MetaRun: r.run, mcpfence.MetaRunEnd: true}}); err != nil {
			return err
		}
	}
	report(e, total, server, write, rounds, log)
	return nil
}

// p50Ratio is the ratio of side b's p50 to side a's per block of
// consecutive rounds, summarised over the blocks.
func p50Ratio(ts [nSides][]time.Duration, b, a int, q float64) bench.Spread {
	n := len(ts[a])
	blocks := min(bench.RatioBlocks, n)
	size := n / blocks
	var per []float64
	for i := range blocks {
		lo, hi := i*size, (i+1)*size
		if i == blocks-1 {
			hi = n
		}
		per = append(per, float64(bench.Percentile(ts[b][lo:hi], q))/float64(bench.Percentile(ts[a][lo:hi], q)))
	}
	return bench.Summarize(per)
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func diff(a, b []time.Duration) []time.Duration {
	out := make([]time.Duration, len(a))
	for i := range a {
		out[i] = a[i] - b[i]
	}
	return out
}

func report(e *bench.Env, total, server, write [nSides][]time.Duration, rounds int, log io.Writer) {
	how := fmt.Sprintf("%d rounds of one call per side over streamable HTTP, order shuffled per round; p50 ratio per block of rounds, median of %d blocks (min-max)", rounds, bench.RatioBlocks)
	ratio := func(key string, b, a int, target float64, note string) {
		sp := p50Ratio(total, b, a, 50)
		m := bench.Metric{Key: key, Value: sp.Median, Unit: "x", Note: note + "; " + how, Spread: &sp}
		if target > 0 {
			m.Target, m.Cmp = target, bench.AtMost
		}
		e.Report.Add(m)
	}
	ratio("mcp_fenced_call_ratio", sideFenced, sideUnfenced, 1.3,
		"MCP 2025-11-25: a tool call fenced per call (acquire + the guarded INSERT under the lease's claim + release after the result) vs the same tool unfenced (the same guarded INSERT under a fixed claim, no lease), p50")
	ratio("mcp_fenced_vs_floor_ratio", sideFenced, sideFloor, 1.1,
		"MCP 2025-11-25: a tool call fenced per call vs the floor: the same tool unfenced doing one more durable commit of its own first (an UPSERT of one row, the shape of a grant), no fencekit, p50")
	ratio("mcp_run_call_ratio", sideRun, sideUnfenced, 1.05,
		"MCP 2025-11-25: a later call of a run (its handle from the run's first call: resume the parked grant, the guarded INSERT, park it again before the result) vs the same tool unfenced, p50")
	ratio("mcp_run_cached_call_ratio", sideRunCached, sideUnfenced, 1.05,
		"MCP 2025-11-25: a later call of a run on the replica that parked it, with Config.RunCache (no lease statement on the call's path: the guarded INSERT under the cached run's claim; the parked expiry extended in the background) vs the same tool unfenced, p50")
	ratio("mcp_release_before_reply_ratio", sideBeforeReply, sideUnfenced, 0,
		"MCP 2025-11-25: a tool call fenced per call with Config.ReleaseBeforeReply (the result waits for the release) vs the same tool unfenced, p50")
	ratio("mcp_fenced_vs_floor_after_ratio", sideFenced, sideFloorAfter, 0,
		"MCP 2025-11-25: a tool call fenced per call vs the floor with a commit after: the same tool unfenced doing one more durable commit of its own first and another in the background as it returns (an UPDATE of the same row, the shape of a release), the result not waiting for it, no fencekit, p50")
	ratio("mcp_floor_ratio", sideFloor, sideUnfenced, 0,
		"MCP 2025-11-25: the floor (one more durable commit of the tool's own) vs the same tool unfenced, p50: what any per-call grant that commits durably costs here")
	ratio("mcp26_fenced_call_ratio", sideFenced26, sideUnfenced26, 1.3,
		"MCP 2026-07-28 (stateless requests): a tool call fenced per call vs the same tool unfenced, p50")
	ratio("mcp26_fenced_vs_floor_ratio", sideFenced26, sideFloor26, 1.1,
		"MCP 2026-07-28 (stateless requests): a tool call fenced per call vs the floor (the same tool unfenced with one more durable commit of its own), p50")
	ratio("mcp26_run_call_ratio", sideRun26, sideUnfenced26, 1.05,
		"MCP 2026-07-28 (stateless requests): a later call of a run (resumed and parked in the database) vs the same tool unfenced, p50")
	ratio("mcp26_run_cached_call_ratio", sideRunCached26, sideUnfenced26, 1.05,
		"MCP 2026-07-28 (stateless requests): a later call of a run served from the run cache (Config.RunCache) vs the same tool unfenced, p50")
	ratio("mcp26_fenced_vs_floor_after_ratio", sideFenced26, sideFloorAfter26, 0,
		"MCP 2026-07-28 (stateless requests): a tool call fenced per call vs the floor with a commit after (one more durable commit of the tool's own before its write and one in the background as it returns), p50")
	ratio("mcp26_floor_ratio", sideFloor26, sideUnfenced26, 0,
		"MCP 2026-07-28 (stateless requests): the floor vs the same tool unfenced, p50")
	p99 := p50Ratio(total, sideFenced, sideUnfenced, 99)
	e.Report.Add(bench.Metric{Key: "mcp_fenced_call_p99_ratio", Value: p99.Median, Unit: "x", Spread: &p99,
		Note: "p99 of the fenced call vs p99 of the unfenced call, per block of rounds"})
	for _, s := range []struct {
		key  string
		side int
	}{{"mcp_unfenced_call", sideUnfenced}, {"mcp_floor_call", sideFloor}, {"mcp_floor_after_call", sideFloorAfter}, {"mcp_fenced_call", sideFenced}, {"mcp_run_call", sideRun}, {"mcp_run_cached_call", sideRunCached},
		{"mcp_release_before_reply_call", sideBeforeReply}, {"mcp26_unfenced_call", sideUnfenced26}, {"mcp26_floor_call", sideFloor26}, {"mcp26_floor_after_call", sideFloorAfter26},
		{"mcp26_fenced_call", sideFenced26},
		{"mcp26_run_call", sideRun26}, {"mcp26_run_cached_call", sideRunCached26}} {
		e.Report.Add(bench.Metric{Key: s.key + "_p50_us", Value: us(bench.Percentile(total[s.side], 50)), Unit: "µs", Note: sideNames[s.side] + ", client's time per call, p50"})
		e.Report.Add(bench.Metric{Key: s.key + "_p99_us", Value: us(bench.Percentile(total[s.side], 99)), Unit: "µs", Note: sideNames[s.side] + ", client's time per call, p99"})
	}
	stage := func(key string, ds []time.Duration, note string) {
		e.Report.Add(bench.Metric{Key: key, Value: us(bench.Percentile(ds, 50)), Unit: "µs", Note: note + ", p50"})
	}
	stage("mcp_stage_transport_us", diff(total[sideFenced], server[sideFenced]), "fenced call: client's time minus the server's (HTTP, JSON-RPC, the SDKs)")
	stage("mcp_stage_fence_us", diff(server[sideFenced], write[sideFenced]), "fenced call: the server's time minus the guarded write (key, acquire, the handler's ctx, the result's lease _meta)")
	stage("mcp_stage_write_us", write[sideFenced], "fenced call: the guarded write (pgguard InTx: BEGIN + mark, INSERT, COMMIT)")
	stage("mcp_stage_fence_unfenced_us", diff(server[sideUnfenced], write[sideUnfenced]), "unfenced call: the server's time minus the guarded write (the middleware passes it through)")
	stage("mcp_stage_write_unfenced_us", write[sideUnfenced], "unfenced call: the same guarded write")
	stage("mcp_stage_fence_run_us", diff(server[sideRun], write[sideRun]), "later call of a run: the server's time minus the guarded write (resuming and parking the run)")
	stage("mcp_stage_fence_run_cached_us", diff(server[sideRunCached], write[sideRunCached]), "later call of a run with RunCache: the server's time minus the guarded write (the cache lookup, the handler's ctx)")
	stage("mcp_stage_fence_before_reply_us", diff(server[sideBeforeReply], write[sideBeforeReply]), "fenced call, release before reply: the server's time minus the guarded write (acquire and release)")

	fmt.Fprintf(log, "MCP tool call over streamable HTTP, %d rounds (one call per side, order shuffled)\n", rounds)
	fmt.Fprintf(log, "%-48s %10s %10s %10s %10s %10s %10s\n", "side", "p50", "p99", "p50 x unf", "transport", "fence", "write")
	for k := range nSides {
		base := sideUnfenced
		if k >= sideUnfenced26 {
			base = sideUnfenced26
		}
		sp := p50Ratio(total, k, base, 50)
		fmt.Fprintf(log, "%-48s %10s %10s %9.2fx %10s %10s %10s\n", sideNames[k],
			bench.Percentile(total[k], 50).Round(time.Microsecond), bench.Percentile(total[k], 99).Round(time.Microsecond), sp.Median,
			bench.Percentile(diff(total[k], server[k]), 50).Round(time.Microsecond),
			bench.Percentile(diff(server[k], write[k]), 50).Round(time.Microsecond),
			bench.Percentile(write[k], 50).Round(time.Microsecond))
	}
}
