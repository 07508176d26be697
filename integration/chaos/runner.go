package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/integration/history"
	"github.com/fencekit/fencekit/internal/netproxy"
	"github.com/fencekit/fencekit/internal/pgcluster"
	"github.com/fencekit/fencekit/sql/migrations"
)

// Config describes one chaos run. Zero fields take the documented defaults.
type Config struct {
	// Seed drives every random choice of the run (keys, steps, faults and
	// their timing). The interleaving of goroutines and processes is not
	// reproducible; the schedule of choices is.
	Seed uint64
	// Duration of the run. Default 10s.
	Duration time.Duration
	// Sessions is the number of lease keys competed for. Default 3.
	Sessions int
	// PerKind is the number of resources per key and guard kind. Default 1.
	PerKind int
	// Goroutines is the number of executions in the test process. Default 4.
	Goroutines int
	// Procs is the number of child processes (each replaced when killed).
	// Default 2; negative means none.
	Procs int
	// ProcExecs is the number of executions per child. Default 2.
	ProcExecs int
	// TTL of every lease (default 1s) and the trust margin (default TTL/4).
	TTL, Margin time.Duration
	// Faults enabled. Default DefaultFaults.
	Faults FaultSet
	// FaultEvery is the mean time between faults the scheduler injects.
	// Default 800ms.
	FaultEvery time.Duration
	// Guards lists the guard kinds written through. Default pg, s3, http.
	Guards []string
	// Lease names the lease implementation: "lease" (package lease, when
	// registered), "reference" (the runner's own protocol-following lease)
	// or "overtrust" (deliberately broken). Default DefaultLease.
	Lease string
	// Overtrust is how long the "overtrust" lease trusts past expiry.
	// Default 2*TTL.
	Overtrust time.Duration
	// Logf, when set, receives progress lines.
	Logf func(format string, args ...any)
}

// DefaultLease is Config.Lease's default: package lease once it is
// registered (see lease_adapter.go), the reference lease otherwise.
var DefaultLease = "reference"

func (c *Config) fill() {
	if c.Duration <= 0 {
		c.Duration = 10 * time.Second
	}
	if c.Sessions <= 0 {
		c.Sessions = 3
	}
	if c.PerKind <= 0 {
		c.PerKind = 1
	}
	if c.Goroutines <= 0 {
		c.Goroutines = 4
	}
	if c.Procs == 0 {
		c.Procs = 2
	}
	if c.Procs < 0 {
		c.Procs = 0
	}
	if c.ProcExecs <= 0 {
		c.ProcExecs = 2
	}
	if c.TTL <= 0 {
		c.TTL = time.Second
	}
	if c.Margin <= 0 {
		c.Margin = c.TTL / 4
	}
	if c.Faults == nil {
		c.Faults = NewFaultSet(DefaultFaults...)
	}
	if c.FaultEvery <= 0 {
		c.FaultEvery = 800 * time.Millisecond
	}
	if len(c.Guards) == 0 {
		c.Guards = []string{GuardPG, GuardS3, GuardHTTP}
	}
	if c.Lease == "" {
		c.Lease = DefaultLease
	}
	if c.Overtrust <= 0 {
		c.Overtrust = 2 * c.TTL
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
}

// Result is what a run produced.
type Result struct {
	Config    Config
	Events    []history.Event
	Report    *history.Report
	Children  int // child processes started (including replacements)
	Killed    int // child processes killed by FaultSIGKILL
	ChildErrs []string
}

// Summary formats the run's figures on a few lines.
func (r *Result) Summary() string {
	s := r.Report.Stats
	var b strings.Builder
	fmt.Fprintf(&b, "chaos seed=%d lease=%s duration=%s: events=%d executions=%d (child processes %d, %d SIGKILLed)\n",
		r.Config.Seed, r.Config.Lease, r.Config.Duration, s.Events, s.Executions, r.Children, r.Killed)
	fmt.Fprintf(&b, "  leases: granted=%d refused=%d acquire-errors=%d renew ok=%d rejected=%d errors=%d releases=%d work-steps=%d\n",
		s.Grants, s.Refusals, s.AcquireErrors, s.RenewOK, s.RenewRejected, s.RenewErrors, s.Releases, s.WorkSteps)
	fmt.Fprintf(&b, "  losses: %s\n", fmtCounts(s.LossByCause))
	fmt.Fprintf(&b, "  faults: %s\n", fmtCounts(s.FaultsByKind))
	var acc, stale, failed, unknown int
	for _, g := range sortedGuardKeys(s.Writes) {
		m := s.Writes[g]
		acc += m[history.Accepted]
		stale += m[history.Stale]
		failed += m[history.Failed]
		unknown += m[history.Unknown]
		fmt.Fprintf(&b, "  writes %-4s accepted=%d refused-stale=%d failed=%d unknown=%d\n", g,
			m[history.Accepted], m[history.Stale], m[history.Failed], m[history.Unknown])
	}
	fmt.Fprintf(&b, "  writes all  accepted=%d refused-stale=%d failed=%d unknown=%d\n", acc, stale, failed, unknown)
	fmt.Fprintf(&b, "  violations=%d", r.Report.Total())
	for _, k := range history.AllViolationKinds {
		if c := r.Report.Counts[k]; c > 0 {
			fmt.Fprintf(&b, " %s=%d", k, c)
		}
	}
	return b.String()
}

func fmtCounts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}

func sortedGuardKeys(m map[string]map[history.Outcome]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// proxiedURL returns url with its host:port replaced by addr.
func proxiedURL(raw, addr string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	u.Host = addr
	return u.String(), nil
}

func hostPort(raw string) (string, error) {
	cfg, err := pgxpool.ParseConfig(raw)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(cfg.ConnConfig.Host, fmt.Sprint(cfg.ConnConfig.Port)), nil
}

// Run performs one chaos run against the test services: a private schema
// and bucket, proxies in front of PostgreSQL and MinIO, the fenced HTTP
// service, Goroutines executions here and Procs child processes (this test
// binary re-executed; its TestMain must call IsChild/ChildMain), and the
// fault scheduler. When the run is over it reads every resource's final
// state and checks the history.
func Run(t testing.TB, cfg Config) *Result {
	t.Helper()
	cfg.fill()
	ctx := context.Background()
	dbURL, schema, direct, restart := database(t, cfg.Faults[FaultPGRestart])
	if err := CreateDataTable(ctx, direct, schema); err != nil {
		t.Fatalf("create data table: %v", err)
	}
	mc, bucket := fencetest.Bucket(t)
	s3env, _ := fencetest.MinIOEnv()

	pgAddr, err := hostPort(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	pgProxy, err := netproxy.New(pgAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pgProxy.Close() })
	s3Proxy, err := netproxy.New(s3env.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s3Proxy.Close() })
	pgURL, err := proxiedURL(dbURL, pgProxy.Addr())
	if err != nil {
		t.Fatal(err)
	}

	// The fenced HTTP service, whose database connections also go through
	// the proxy.
	svcPool := fencetest.PoolWith(t, pgURL, func(c *pgxpool.Config) {
		c.MaxConns = 8
		c.ConnConfig.RuntimeParams["statement_timeout"] = "5000"
	})
	handler, err := NewHTTPService(svcPool, schema)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)

	var faults []Fault
	for f, on := range cfg.Faults {
		if on {
			faults = append(faults, f)
		}
	}
	sort.Slice(faults, func(i, j int) bool { return faults[i] < faults[j] })
	base := procConfig{
		Seed: cfg.Seed, Duration: cfg.Duration, Sessions: cfg.Sessions, PerKind: cfg.PerKind,
		PGURL: pgURL, S3: s3Endpoint{Endpoint: s3Proxy.Addr(), AccessKey: s3env.AccessKey, SecretKey: s3env.SecretKey},
		Bucket: bucket, Schema: schema, HTTPURL: srv.URL + "/write", TTL: cfg.TTL, Margin: cfg.Margin,
		Lease: cfg.Lease, Faults: faults, Guards: cfg.Guards, Overtrust: cfg.Overtrust,
	}
	rec := history.NewRecorder()
	res := &Result{Config: cfg}
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()

	parent := base
	parent.Prefix, parent.Execs = "g", cfg.Goroutines
	pr, err := newProcRun(ctx, parent, rec)
	if err != nil {
		t.Fatalf("set up executions: %v", err)
	}
	defer pr.close()

	kids := &children{cfg: cfg, base: base, rec: rec, res: res, logf: cfg.Logf}
	sched := &scheduler{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed)), rec: rec, pg: pgProxy, s3: s3Proxy, kids: kids, restart: restart, logf: cfg.Logf}

	cfg.Logf("chaos: seed=%d lease=%s duration=%s goroutines=%d procs=%dx%d sessions=%d faults=%s",
		cfg.Seed, cfg.Lease, cfg.Duration, cfg.Goroutines, cfg.Procs, cfg.ProcExecs, cfg.Sessions, cfg.Faults)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); pr.run(runCtx) }()
	go func() { defer wg.Done(); kids.run(runCtx) }()
	go func() { defer wg.Done(); sched.run(runCtx) }()
	wg.Wait()
	heal(pgProxy)
	heal(s3Proxy)

	// Final states, read directly (not through the proxies).
	fctx, fcancel := context.WithTimeout(ctx, time.Minute)
	defer fcancel()
	finals, err := finalReader(direct, mc, bucket, schema)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keysFor(cfg.Sessions) {
		for _, g := range cfg.Guards {
			for j := 0; j < cfg.PerKind; j++ {
				name := resourceName(k, g, j)
				v, tok, found, err := finals[g].read(fctx, name)
				if err != nil {
					t.Fatalf("read final state of %s: %v", name, err)
				}
				e := history.Event{Kind: history.Final, Exec: "final", Resource: name, Guard: g}
				if found {
					e.Token, e.Value = tok, v
				}
				rec.Record(e)
			}
		}
	}
	res.Events = rec.Events()
	res.Report = history.Check(res.Events, history.Options{})
	return res
}

// finalReader returns targets that read directly from the stores.
func finalReader(pool *pgxpool.Pool, mc minioClient, bucket, schema string) (map[string]target, error) {
	pgt, err := newPGTarget(pool, schema)
	if err != nil {
		return nil, err
	}
	s3t, err := newS3Target(mc, bucket)
	if err != nil {
		return nil, err
	}
	return map[string]target{GuardPG: pgt, GuardS3: s3t, GuardHTTP: &httpTarget{pool: pool, schema: schema}}, nil
}

// children runs and replaces the child processes.
type children struct {
	cfg  Config
	base procConfig
	rec  *history.Recorder
	res  *Result
	logf func(string, ...any)

	mu      sync.Mutex
	running []*exec.Cmd
	stopped map[*exec.Cmd]bool
}

func (c *children) run(ctx context.Context) {
	var wg sync.WaitGroup
	for i := 0; i < c.cfg.Procs; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for gen := 0; ctx.Err() == nil; gen++ {
				dl, _ := ctx.Deadline()
				left := time.Until(dl)
				if left < c.cfg.TTL {
					return
				}
				pc := c.base
				pc.Prefix = fmt.Sprintf("p%d.%d", i, gen)
				pc.Execs = c.cfg.ProcExecs
				pc.Duration = left
				pc.Seed = c.cfg.Seed ^ uint64(1000*(i+1)+gen)
				c.runOne(ctx, pc)
			}
		}()
	}
	wg.Wait()
}

func (c *children) runOne(ctx context.Context, pc procConfig) {
	conf, err := json.Marshal(pc)
	if err != nil {
		panic(err)
	}
	// The child ends by itself when its duration is over; the run's end
	// must not kill it early.
	cmd := exec.CommandContext(context.WithoutCancel(ctx), os.Args[0], "-test.run=^$") //nolint:gosec // re-executes this very test binary as a child execution process
	cmd.Env = append(os.Environ(), childEnv+"="+string(conf))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		c.fail(pc.Prefix, err)
		return
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		c.fail(pc.Prefix, err)
		return
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		c.fail(pc.Prefix, err)
		return
	}
	c.mu.Lock()
	c.running = append(c.running, cmd)
	c.res.Children++
	c.mu.Unlock()
	events, derr := history.Decode(stdout)
	werr := cmd.Wait()
	_ = stdin.Close()
	c.mu.Lock()
	for i, r := range c.running {
		if r == cmd {
			c.running = append(c.running[:i], c.running[i+1:]...)
			break
		}
	}
	killed := c.stopped[cmd]
	c.mu.Unlock()
	c.rec.Merge(events...)
	if derr != nil {
		c.fail(pc.Prefix, derr)
	}
	if werr != nil && !killed {
		c.fail(pc.Prefix, fmt.Errorf("%w; stderr: %s", werr, tail(stderr.String())))
	}
}

func tail(s string) string {
	if len(s) > 2000 {
		return "…" + s[len(s)-2000:]
	}
	return s
}

func (c *children) fail(prefix string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.res.ChildErrs = append(c.res.ChildErrs, prefix+": "+err.Error())
}

// pick returns a random running child.
func (c *children) pick(rng *rand.Rand) *exec.Cmd {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.running) == 0 {
		return nil
	}
	return c.running[rng.IntN(len(c.running))]
}

func (c *children) markKilled(cmd *exec.Cmd) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped == nil {
		c.stopped = map[*exec.Cmd]bool{}
	}
	c.stopped[cmd] = true
	c.res.Killed++
}

// scheduler injects the infrastructure faults.
type scheduler struct {
	cfg  Config
	rng  *rand.Rand
	rec  *history.Recorder
	pg   *netproxy.Proxy
	s3   *netproxy.Proxy
	kids *children
	// restart crashes and restarts the run's private PostgreSQL cluster
	// (nil unless FaultPGRestart is enabled).
	restart func(context.Context) error
	logf    func(string, ...any)
}

func (s *scheduler) record(f Fault, detail string) {
	s.rec.Record(history.Event{Kind: history.Fault, Exec: "scheduler", Cause: string(f), Value: detail})
}

func (s *scheduler) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(s.rng.Int64N(int64(hi-lo)+1))
}

func (s *scheduler) run(ctx context.Context) {
	kinds := s.cfg.Faults.infra(s.cfg.Procs)
	if len(kinds) == 0 {
		return
	}
	ttl := s.cfg.TTL
	for {
		sleepCtx(ctx, time.Duration(s.rng.ExpFloat64()*float64(s.cfg.FaultEvery)))
		if ctx.Err() != nil {
			return
		}
		f := kinds[s.rng.IntN(len(kinds))]
		switch f {
		case FaultPGCut, FaultS3Cut:
			p, name := s.proxyOf(f)
			d := s.between(0, ttl/2)
			s.record(f, fmt.Sprintf("%s connections reset, new ones refused for %s", name, d.Round(time.Millisecond)))
			p.Cut()
			sleepCtx(ctx, d) // the fault's duration
			heal(p)
		case FaultPGHold:
			d := s.between(ttl/2, ttl*3/2)
			s.record(f, "PostgreSQL traffic held for "+d.Round(time.Millisecond).String())
			s.pg.Blackhole()
			sleepCtx(ctx, d)
			heal(s.pg)
		case FaultPGSlow, FaultS3Slow:
			p, name := s.proxyOf(f)
			lat := s.between(20*time.Millisecond, 150*time.Millisecond)
			d := s.between(ttl/2, 2*ttl)
			s.record(f, fmt.Sprintf("%s latency %s for %s", name, lat.Round(time.Millisecond), d.Round(time.Millisecond)))
			p.SetLatency(netproxy.Both, lat)
			sleepCtx(ctx, d)
			heal(p)
		case FaultLostReply:
			// Every reply in flight through one proxy is lost: requests
			// still reach the server, replies are held, then the
			// connections are reset.
			p, name := s.pg, "PostgreSQL"
			if s.rng.IntN(2) == 0 {
				p, name = s.s3, "MinIO"
			}
			d := s.between(20*time.Millisecond, ttl/3)
			s.record(f, fmt.Sprintf("%s replies dropped for %s, then connections reset", name, d.Round(time.Millisecond)))
			p.Pause(netproxy.Downstream)
			sleepCtx(ctx, d)
			p.CloseConns()
			heal(p)
		case FaultSIGKILL:
			if cmd := s.kids.pick(s.rng); cmd != nil {
				s.kids.markKilled(cmd)
				s.record(f, fmt.Sprintf("pid %d", cmd.Process.Pid))
				_ = cmd.Process.Kill()
			}
		case FaultSIGSTOP:
			if cmd := s.kids.pick(s.rng); cmd != nil {
				d := s.between(ttl+ttl/5, 2*ttl)
				s.record(f, fmt.Sprintf("pid %d frozen for %s", cmd.Process.Pid, d.Round(time.Millisecond)))
				_ = cmd.Process.Signal(syscall.SIGSTOP)
				time.Sleep(d) // the freeze itself; SIGCONT must follow even at the end of the run
				_ = cmd.Process.Signal(syscall.SIGCONT)
			}
		case FaultPGRestart:
			if s.restart == nil {
				continue
			}
			s.record(f, "pg_ctlcluster stop -m immediate; start (private cluster)")
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			err := s.restart(rctx)
			cancel()
			if err != nil {
				s.logf("chaos: pg restart failed: %v", err)
			}
		}
	}
}

// database returns the run's database URL, a private migrated schema, a
// direct pool and, when restart is wanted, a function that crashes and
// restarts the server. With restart the database is a private cluster made
// by internal/pgcluster (dropped at the end), never the shared server.
func database(t testing.TB, restart bool) (url, schema string, direct *pgxpool.Pool, restartFn func(context.Context) error) {
	t.Helper()
	if !restart {
		return fencetest.DatabaseURL(), fencetest.Schema(t, migrations.Lease, migrations.Guard), fencetest.Pool(t), nil
	}
	c := pgcluster.New(t, pgcluster.Options{Settings: []string{"max_connections = 200"}})
	direct = c.Pool("postgres")
	schema = fencetest.RandomName("fk_chaos_")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := migrations.Migrate(ctx, direct, migrations.Options{Schema: schema}, migrations.Lease, migrations.Guard); err != nil {
		t.Fatalf("migrate private cluster: %v", err)
	}
	return c.URL("postgres"), schema, direct, c.Restart
}

// heal ends every fault of p.
func heal(p *netproxy.Proxy) {
	p.SetLatency(netproxy.Both, 0)
	p.Restore()
}

func (s *scheduler) proxyOf(f Fault) (*netproxy.Proxy, string) {
	if f == FaultS3Cut || f == FaultS3Slow {
		return s.s3, "MinIO"
	}
	return s.pg, "PostgreSQL"
}
