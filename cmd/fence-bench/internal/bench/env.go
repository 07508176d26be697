package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/sql/migrations"
)

// Env is what every measurement case runs against: the services, the mode
// and the report the case adds its figures to.
type Env struct {
	Ctx   context.Context
	Quick bool   // short run (BENCH_QUICK=1)
	DBURL string // PostgreSQL
	// PeerDir is the directory of the pglock peer module (built with
	// `go build` when the lease cycle case starts); empty skips that side.
	PeerDir string
	// StoresDir is the directory of the store bench module (storesbench,
	// run with `go run` by the Redis, MySQL and NATS guard cases); empty
	// reports those cases as not measured.
	StoresDir string
	// MCPDir is the directory of the MCP bench module (mcpbench, beside
	// this package); empty skips the mcp_call case with an error.
	MCPDir string
	// EffectsDir is the directory of the effects bench module
	// (effectsbench, beside this package); empty skips the effects case
	// with an error.
	EffectsDir string
	// HeartbeatLeases is the number of leases the heartbeat case holds in
	// one Manager; 0 takes its default (20,000 with Quick, else 1,000,000).
	HeartbeatLeases int
	// GrowthMillion adds 1,000,000 held leases to the growth case's
	// renewal sizes (10,000 and 100,000; minutes of grants on a shared
	// machine, so off by default).
	GrowthMillion bool
	Report        *Report
	Series        []Series  // latency samples for the chart
	Growth        *Growth   // the growth case's points for the chart; nil if it did not run
	Log           io.Writer // progress lines; nil discards them
}

func (e *Env) logf(format string, args ...any) {
	if e.Log != nil {
		fmt.Fprintf(e.Log, "[bench] "+format+"\n", args...)
	}
}

// Case is one measurement: Keys are the metrics it reports, set to NaN
// (JSON null) with a note when it fails.
type Case struct {
	Name string
	Keys []string
	Run  func(*Env) error
}

// Cases returns every measurement in the order make bench runs them.
func Cases() []Case {
	return []Case{
		{"pg_guard", []string{"pg_guard_overhead_ratio"}, PGGuard},
		PGLockGuardCase(),
		{"s3_guard", []string{"s3_guard_overhead_ratio"}, S3Guard},
		{"file_guard", FileGuardKeys, FileGuard},
		StoreCase("redis_guard", "redis", RedisGuardKeys),
		StoreCase("mysql_guard", "mysql", MySQLGuardKeys),
		StoreCase("nats_guard", "nats", NATSGuardKeys),
		{"lease_cycle", []string{"lease_cycle_ratio_vs_raw", "lease_cycle_ratio_vs_seed", "lease_cycle_ratio_vs_keep_row", "lease_cycle_ratio_vs_pglock", "lease_cycle_ratio_vs_seed_w1", "lease_cycle_ratio_vs_seed_w32"}, LeaseCycle},
		{"handover", []string{"handover_p50_ms", "handover_p99_ms"}, Handover},
		{"contention", nil, Contention},
		{"renewal", []string{"renew_leases_per_statement", "renew_batch_speedup", "heap_bytes_per_lease", "renew_busy_fraction"}, Renewal},
		{"heartbeat", []string{"hb_heap_bytes_per_lease", "hb_statements_per_period", "hb_busy_fraction", "hb_takeover_cancelled", "hb_expiry_cancelled"}, Heartbeat},
		{"deployment", []string{"deploy_direct_takeover_p50_ms", "deploy_pgb_tx_takeover_p50_ms", "deploy_pgb_tx_listen_takeover_p50_ms"}, Deployment},
		{"takeover", []string{"takeover_ratio_vs_lease_cycle", "takeovers_per_s"}, Takeover},
		{"storm", StormKeys, Storm},
		MCPCallCase(),
		EffectsCase(),
		{"growth", []string{"growth_cycle_ratio_w1", "growth_cycle_ratio_w8", "growth_cycle_ratio_w32", "growth_cycle_ratio_w128"}, GrowthCase},
	}
}

// Run runs the cases in order, each isolated from the others' failures
// (errors and panics are recorded and the case's keys set to NaN), and
// returns the errors by case name.
func (e *Env) Run(cases []Case) map[string]string {
	errs := map[string]string{}
	for _, c := range cases {
		e.logf("%s ...", c.Name)
		t0 := time.Now()
		if err := safe(c.Run, e); err != nil {
			errs[c.Name] = err.Error()
			e.logf("%s failed: %v", c.Name, err)
			for _, k := range c.Keys {
				if _, ok := e.Report.Get(k); !ok {
					e.Report.Add(Metric{Key: k, Value: math.NaN(), Note: "failed: " + c.Name})
				}
			}
		}
		e.logf("%s done in %v", c.Name, time.Since(t0).Round(time.Millisecond))
	}
	return errs
}

func safe(run func(*Env) error, e *Env) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return run(e)
}

// rounds is the number of alternating rounds and each side's duration in
// a round of the two-sided comparisons.
func (e *Env) rounds() (int, time.Duration) {
	if e.Quick {
		return 4, 400 * time.Millisecond
	}
	return 10, time.Second
}

func randName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// schema creates a private schema with the given migration sets; drop it
// with the returned func.
func (e *Env) schema(sets ...migrations.Set) (string, func(), error) {
	pool, err := pgxpool.New(e.Ctx, e.DBURL)
	if err != nil {
		return "", nil, err
	}
	name := randName("fk_bench_")
	if _, err := migrations.Migrate(e.Ctx, pool, migrations.Options{Schema: name}, sets...); err != nil {
		pool.Close()
		return "", nil, err
	}
	return name, func() {
		_ = migrations.DropSchema(context.Background(), pool, name)
		pool.Close()
	}, nil
}

// pool opens a pool of at most maxConns connections (0: pgx default) with
// tracer (a pgx.QueryTracer) if non-nil.
func (e *Env) pool(maxConns int32, tracer pgx.QueryTracer) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(e.DBURL)
	if err != nil {
		return nil, err
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	if tracer != nil {
		cfg.ConnConfig.Tracer = tracer
	}
	return pgxpool.NewWithConfig(e.Ctx, cfg)
}

// Counter is a pgx tracer counting statements (single queries and each
// query of a batch) and, for statements containing its match string, their
// number, total duration, rows affected and — while recording — their
// intervals of wall time.
type Counter struct {
	n, matched, matchedNs, matchedRows atomic.Int64

	match     string
	recording atomic.Bool
	mu        sync.Mutex
	spans     []Interval
}

// NewCounter returns a counter of all statements that singles out those
// containing match (none when match is empty).
func NewCounter(match string) *Counter { return &Counter{match: match} }

type startKey struct{}

// Statements is the number of statements seen.
func (c *Counter) Statements() int64 { return c.n.Load() }

// Matched returns the matching statements seen, their summed duration and
// the rows they affected.
func (c *Counter) Matched() (n int64, d time.Duration, rows int64) {
	return c.matched.Load(), time.Duration(c.matchedNs.Load()), c.matchedRows.Load()
}

// Record starts (true) or stops (false) recording the intervals of matching
// statements; starting clears earlier ones.
func (c *Counter) Record(on bool) {
	c.mu.Lock()
	if on {
		c.spans = nil
	}
	c.recording.Store(on)
	c.mu.Unlock()
}

// Spans returns the recorded intervals.
func (c *Counter) Spans() []Interval {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Interval(nil), c.spans...)
}

func (c *Counter) matches(sql string) bool { return c.match != "" && strings.Contains(sql, c.match) }

// TraceQueryStart implements pgx.QueryTracer.
func (c *Counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	if !c.matches(d.SQL) {
		return ctx
	}
	return context.WithValue(ctx, startKey{}, time.Now())
}

// TraceQueryEnd implements pgx.QueryTracer.
func (c *Counter) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	t0, ok := ctx.Value(startKey{}).(time.Time)
	if !ok {
		return
	}
	t1 := time.Now()
	c.matched.Add(1)
	c.matchedNs.Add(int64(t1.Sub(t0)))
	c.matchedRows.Add(d.CommandTag.RowsAffected())
	if c.recording.Load() {
		c.mu.Lock()
		c.spans = append(c.spans, Interval{t0, t1})
		c.mu.Unlock()
	}
}

// TraceBatchStart implements pgx.BatchTracer.
func (c *Counter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	c.n.Add(int64(len(d.Batch.QueuedQueries)))
	return ctx
}

// TraceBatchQuery implements pgx.BatchTracer.
func (c *Counter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd implements pgx.BatchTracer.
func (c *Counter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// postgresCPU returns the user+system CPU time consumed so far by every
// process named postgres visible in /proc (the server is local).
func postgresCPU() (time.Duration, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	var ticks int64
	for _, d := range ents {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i, j := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if i < 0 || j < 0 || s[i+1:j] != "postgres" {
			continue
		}
		f := strings.Fields(s[j+2:])
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		sy, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += u + sy
	}
	return time.Duration(ticks) * (time.Second / 100), nil // USER_HZ = 100 on Linux
}

func xactCommits(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`).Scan(&n)
	return n, err
}

// steadyRenewal is what a Counter matched over whole renewal periods.
type steadyRenewal struct {
	stmts, rows int64         // statements matched and rows they returned
	stmtTime    time.Duration // their summed duration
	window      time.Duration // the recorded wall time
	busy        time.Duration // time with at least one statement in flight
	periods     []float64     // busy fraction of each period
	perPeriod   float64       // statements per period
}

// measureSteadyRenewal lets one period of renewEvery pass to settle, then
// records c over periods whole periods.
func measureSteadyRenewal(c *Counter, renewEvery time.Duration, periods int) steadyRenewal {
	time.Sleep(renewEvery)
	s0, d0, r0 := c.Matched()
	c.Record(true)
	w0 := time.Now()
	time.Sleep(time.Duration(periods) * renewEvery)
	w1 := time.Now()
	c.Record(false)
	s1, d1, r1 := c.Matched()
	spans := c.Spans()
	st := steadyRenewal{stmts: s1 - s0, stmtTime: d1 - d0, rows: r1 - r0, window: w1.Sub(w0),
		busy: BusyTime(spans, w0, w1), periods: make([]float64, periods)}
	for p := range periods {
		from := w0.Add(time.Duration(p) * renewEvery)
		st.periods[p] = float64(BusyTime(spans, from, from.Add(renewEvery))) / float64(renewEvery)
	}
	st.perPeriod = float64(st.stmts) * float64(renewEvery) / float64(st.window)
	return st
}
