package ha

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/internal/obs/obstest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// noFloor runs the cases with Managers that have no floor source, as
// fencekit was before the automatic check: every case then fails, with all
// grants refused after the node change (the problem the check solves).
var noFloor = flag.Bool("ha.nofloor", false, "Managers without a floor source (shows the refusals the automatic check ends)")

const (
	schema  = "fk"
	workers = 2
	keys    = 32
	// recoverBound: a case fails when no grant comes within this long
	// after the new primary accepts writes (liveness; the measured time is
	// logged and recorded in docs/operations.md).
	recoverBound = 30 * time.Second
)

func bg() context.Context { return context.Background() }

// grant is one successful acquisition of the workload.
type grant struct {
	at    time.Time // when Acquire returned
	key   int
	claim fence.Claim
}

// failure is one failed acquisition of the workload.
type failure struct {
	at   time.Time
	key  int
	kind string // "unchecked", "floor", "held", "other"
	err  error
}

// probe is one write accepted by a node, seen by the writability probe.
type probe struct {
	at   time.Time
	node string // system identifier / timeline
}

// world is a Patroni cluster with a lease schema, a workload of Managers on
// the multi-host URL, a guard whose marks (and the guarded rows) live on the
// shared test server, and a probe per node.
type world struct {
	t      *testing.T
	c      *Cluster
	shared *pgxpool.Pool
	gs     string
	guard  *pgguard.Guard
	lease  *pgxpool.Pool
	m      *lease.Manager
	logs   *obstest.Logs
	meter  *obstest.Meter

	mu       sync.Mutex
	grants   []grant
	failures []failure
	probes   []probe
	runs     map[fence.Token]map[string]bool // runs granted each token

	stop     chan struct{}
	haltOnce sync.Once
	wg       sync.WaitGroup
}

func newWorld(t *testing.T, opts Options) *world {
	t.Helper()
	c := New(t, opts)
	w := &world{t: t, c: c, shared: fencetest.Pool(t), runs: map[fence.Token]map[string]bool{}, stop: make(chan struct{})}
	w.gs = fencetest.Schema(t, migrations.Guard)
	_, err := w.shared.Exec(bg(), fmt.Sprintf(`CREATE TABLE %q.ha_writes (key text NOT NULL, token bigint NOT NULL, run text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`, w.gs))
	require.NoError(t, err)
	w.guard, err = pgguard.New(pgguard.Config{DB: w.shared, Schema: w.gs})
	require.NoError(t, err)

	url := c.URL()
	if opts.HAProxy {
		url = c.ProxyURL()
	}
	w.lease = fencetest.PoolWith(t, url, func(cfg *pgxpool.Config) {
		cfg.MaxConns = 8
		cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	})
	_, err = migrations.Migrate(bg(), w.lease, migrations.Options{Schema: schema}, migrations.Lease)
	require.NoError(t, err)
	_, err = w.lease.Exec(bg(), `CREATE TABLE ha_probe (id bigserial PRIMARY KEY, at timestamptz DEFAULT clock_timestamp())`)
	require.NoError(t, err)
	// The application role: not the schema owner, with the grants of
	// docs/operations.md (EXECUTE on the floor check included).
	role := "fk_app"
	for _, s := range []string{
		`CREATE ROLE fk_app LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT`,
		`GRANT USAGE ON SCHEMA fk TO fk_app`,
		`GRANT SELECT, INSERT, UPDATE ON fk.fencekit_leases TO fk_app`,
		`GRANT SELECT, INSERT, UPDATE ON fk.fencekit_managers, fk.fencekit_displaced TO fk_app`,
		`GRANT USAGE, SELECT ON SEQUENCE fk.fencekit_token_seq TO fk_app`,
		`GRANT EXECUTE ON FUNCTION fk.fencekit_check_floor(bigint, bigint) TO fk_app`,
	} {
		_, err = w.lease.Exec(bg(), s)
		require.NoError(t, err, s)
	}
	app := fencetest.PoolWith(t, url, func(cfg *pgxpool.Config) {
		cfg.MaxConns = 8
		cfg.ConnConfig.ConnectTimeout = 2 * time.Second
		cfg.ConnConfig.User = role
	})
	// Wait until the standby has the role and the schema (a failover
	// right away must not lose them: they are not what is measured).
	standby := fencetest.PoolWith(t, c.Other(c.Nodes[0]).NodeURL(), nil)
	c.waitFor(30*time.Second, "the standby to replay the schema", func() bool {
		var ok bool
		err := standby.QueryRow(bg(), `SELECT to_regprocedure('fk.fencekit_check_floor(bigint, bigint, boolean)') IS NOT NULL AND to_regclass('public.ha_probe') IS NOT NULL`).Scan(&ok)
		return err == nil && ok
	})

	logs, log := obstest.NewLogs()
	w.logs = logs
	w.meter = obstest.NewMeter(t)
	cfg := lease.Config{Pool: app, Schema: schema, TTL: 3 * time.Second, CallTimeout: time.Second,
		Logger: log, MeterProvider: w.meter.Provider}
	if !*noFloor {
		marks, err := pgguard.NewMarks(pgguard.MarksConfig{DB: w.shared, Schema: w.gs})
		require.NoError(t, err)
		cfg.Floor = lease.FloorConfig{Source: marks.Highest}
	}
	w.m, err = lease.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.m.Close() })
	t.Cleanup(w.halt)
	return w
}

// start runs the workload and the probes until halt.
func (w *world) start() {
	for i := range workers {
		w.wg.Add(1)
		go w.work(i)
	}
	for _, n := range w.c.Nodes {
		w.wg.Add(1)
		go w.probe(n)
	}
}

// halt stops the workload and the probes (idempotent).
func (w *world) halt() {
	w.haltOnce.Do(func() {
		close(w.stop)
		w.wg.Wait()
	})
}

func (w *world) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// pace is the workload's and the probes' period (about 200 attempts per
// second per worker at most; the refusals of the reported problem came at
// 21 per second).
const pace = 5 * time.Millisecond

func (w *world) work(id int) {
	defer w.wg.Done()
	for i := id; !w.stopped(); i += workers {
		k := i % keys
		w.once(k)
		time.Sleep(pace)
	}
}

// once acquires key k, writes once under the grant through the guard (the
// guarded row in the same transaction as the mark) and releases.
func (w *world) once(k int) {
	key := lease.Key{AccountID: "acct", SessionID: fmt.Sprintf("s%02d", k)}
	l, err := w.m.Acquire(bg(), key)
	now := time.Now()
	if err != nil {
		kind := "other"
		switch {
		case errors.Is(err, lease.ErrFailoverUnchecked):
			kind = "unchecked"
		case errors.Is(err, lease.ErrTokenFloor):
			kind = "floor"
		case errors.Is(err, lease.ErrHeld):
			kind = "held"
		}
		w.mu.Lock()
		w.failures = append(w.failures, failure{at: now, key: k, kind: kind, err: err})
		w.mu.Unlock()
		return
	}
	c := fence.Claim{Token: l.Token(), Run: l.RunID().String()}
	w.mu.Lock()
	w.grants = append(w.grants, grant{at: now, key: k, claim: c})
	if w.runs[c.Token] == nil {
		w.runs[c.Token] = map[string]bool{}
	}
	w.runs[c.Token][c.Run] = true
	w.mu.Unlock()
	_ = w.write(k, c) // a stale or reused refusal is what the guard is for; counted from ha_writes
	ctx, cancel := context.WithTimeout(bg(), time.Second)
	_, _ = l.Release(ctx)
	cancel()
}

func (w *world) write(k int, c fence.Claim) error {
	ctx, cancel := context.WithTimeout(bg(), 2*time.Second)
	defer cancel()
	res := fence.JoinResource("doc", strconv.Itoa(k))
	return w.guard.InTx(fence.WithClaim(ctx, c), res, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %q.ha_writes (key, token, run) VALUES ($1, $2, $3)`, w.gs), res, int64(c.Token), c.Run)
		return err
	})
}

// probe writes to one node (directly, not through the multi-host URL) every
// pace and records each accepted write with the node's identity.
func (w *world) probe(n *Node) {
	defer w.wg.Done()
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}()
	for !w.stopped() {
		if conn == nil {
			ctx, cancel := context.WithTimeout(bg(), time.Second)
			c, err := pgx.Connect(ctx, n.NodeURL())
			cancel()
			if err != nil {
				time.Sleep(pace)
				continue
			}
			conn = c
		}
		ctx, cancel := context.WithTimeout(bg(), 500*time.Millisecond)
		var node string
		err := conn.QueryRow(ctx, `WITH i AS (INSERT INTO ha_probe DEFAULT VALUES RETURNING id)
SELECT (SELECT system_identifier::text FROM pg_control_system()) || '/' || left(pg_walfile_name(pg_current_wal_lsn()), 8) FROM i`).Scan(&node)
		cancel()
		if err != nil {
			if conn.IsClosed() || !isServerError(err) {
				_ = conn.Close(context.Background())
				conn = nil
			}
		} else {
			w.mu.Lock()
			w.probes = append(w.probes, probe{at: time.Now(), node: node})
			w.mu.Unlock()
		}
		time.Sleep(pace)
	}
}

func isServerError(err error) bool {
	var pe interface{ SQLState() string }
	return errors.As(err, &pe)
}

// lastProbe returns the node of the latest accepted probe write.
func (w *world) lastProbe() probe {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.probes) == 0 {
		return probe{}
	}
	return w.probes[len(w.probes)-1]
}

func (w *world) grantCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.grants)
}

// waitGrants waits until the workload has made n more grants.
func (w *world) waitGrants(n int, d time.Duration) {
	w.t.Helper()
	target := w.grantCount() + n
	w.c.waitFor(d, fmt.Sprintf("%d grants", n), func() bool { return w.grantCount() >= target })
}

// result is what a case measured.
type result struct {
	name          string
	writableAt    time.Time     // first write the new primary accepted (probe)
	outage        time.Duration // from the event to writableAt (Patroni's part)
	firstGrant    time.Duration // from writableAt to the first grant after it
	refused       int           // grants refused as unchecked or below the floor, from the event to the first grant
	refusedAfterW int           // of them, after writableAt
	otherErrors   int           // other failed acquisitions (connections), event to first grant
	reissued      int           // tokens granted to more than one run (whole run)
	badWrites     int           // writes accepted under such a token (from the store)
	refusedStmts  float64       // acquire statements the database refused as unchecked (metric)
	advancedFrom  string        // the automatic check's advanced_from ("" if none logged)
	floor         string        // the stored floor the check that advanced reported
	maxBefore     fence.Token   // highest token granted before the event
	checks        int           // automatic checks logged
	grantsBefore  int
	oldTimeline   string
	newTimeline   string
}

// measure waits for recovery after an event at evAt that left the node
// oldNode, then computes the figures.
func (w *world) measure(name string, evAt time.Time, oldNode string) result {
	w.t.Helper()
	r := result{name: name, oldTimeline: oldNode}
	w.c.waitFor(2*time.Minute, "the new primary to accept writes", func() bool {
		p := w.lastProbe()
		return p.at.After(evAt) && p.node != oldNode
	})
	w.mu.Lock()
	for _, p := range w.probes {
		if p.at.After(evAt) && p.node != oldNode {
			r.writableAt, r.newTimeline = p.at, p.node
			break
		}
	}
	w.mu.Unlock()
	deadline := r.writableAt.Add(recoverBound)
	for {
		w.mu.Lock()
		ok := len(w.grants) > 0 && w.grants[len(w.grants)-1].at.After(r.writableAt)
		var refused, tried int
		for _, f := range w.failures {
			if f.at.After(r.writableAt) {
				tried++
				if f.kind == "unchecked" || f.kind == "floor" {
					refused++
				}
			}
		}
		w.mu.Unlock()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			w.c.dumpLogs()
			w.t.Fatalf("%s: no grant within %s after the new primary accepted writes: %d of %d acquisitions refused as unchecked or below the floor", name, recoverBound, refused, tried)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// More traffic after recovery, until every key has been granted (and
	// written) again above every earlier token.
	everyKey := time.Now().Add(time.Minute)
	for missing := w.notGrantedSince(r.writableAt); len(missing) > 0; missing = w.notGrantedSince(r.writableAt) {
		if time.Now().After(everyKey) {
			w.c.dumpLogs()
			w.t.Fatalf("%s: keys not granted within a minute after recovery (key: last failed acquisition): %v", name, missing)
		}
		time.Sleep(50 * time.Millisecond)
	}
	w.halt()

	var first time.Time
	for _, g := range w.grants {
		if g.at.After(r.writableAt) {
			first = g.at
			break
		}
		if g.at.Before(evAt) {
			r.grantsBefore++
			r.maxBefore = max(r.maxBefore, g.claim.Token)
		}
	}
	r.firstGrant = first.Sub(r.writableAt)
	r.outage = r.writableAt.Sub(evAt)
	for _, f := range w.failures {
		if f.at.Before(evAt) || f.at.After(first) {
			continue
		}
		switch f.kind {
		case "unchecked", "floor":
			r.refused++
			if f.at.After(r.writableAt) {
				r.refusedAfterW++
			}
		case "other":
			r.otherErrors++
		}
	}
	for _, runs := range w.runs {
		if len(runs) > 1 {
			r.reissued++
		}
	}
	require.NoError(w.t, w.shared.QueryRow(bg(), fmt.Sprintf(`SELECT count(*) FROM %[1]q.ha_writes
 WHERE token IN (SELECT token FROM %[1]q.ha_writes GROUP BY token HAVING count(DISTINCT run) > 1)`, w.gs)).Scan(&r.badWrites))
	r.refusedStmts = obstest.Value(w.meter.Collect(), "fencekit.lease.refused", map[string]string{"reason": "failover_unchecked"})
	for _, rec := range w.logs.Messages("lease: token floor checked automatically; grants resume on this node") {
		r.checks++
		if v := rec.Attrs["advanced_from"]; v != "0" {
			r.advancedFrom, r.floor = v, rec.Attrs["floor"]
		}
	}
	return r
}

// notGrantedSince returns the keys not granted since t, each with the
// error of its latest failed acquisition ("" if none failed).
func (w *world) notGrantedSince(t time.Time) map[int]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	missing := map[int]string{}
	for k := range keys {
		missing[k] = ""
	}
	for _, g := range w.grants {
		if g.at.After(t) {
			delete(missing, g.key)
		}
	}
	for _, f := range w.failures {
		if _, ok := missing[f.key]; ok && f.at.After(t) {
			missing[f.key] = f.err.Error()
		}
	}
	return missing
}

// verify asserts the case's safety and liveness and logs its figures.
func (w *world) verify(r result) {
	w.t.Helper()
	w.t.Logf("%s: timeline %s -> %s; new primary accepted writes %s after the event; first grant %s after the new primary accepted writes; grants refused (unchecked/floor) from the event to the first grant %d (%d after the primary accepted writes); other failed acquisitions %d; refused acquire statements (metric) %.0f; automatic checks %d (sequence advanced from %q to above floor %q); grants before the event %d (highest token %d), in all %d; tokens re-issued %d; writes accepted under a re-issued token %d",
		r.name, r.oldTimeline, r.newTimeline, r.outage.Round(time.Millisecond), r.firstGrant.Round(time.Millisecond), r.refused, r.refusedAfterW, r.otherErrors,
		r.refusedStmts, r.checks, r.advancedFrom, r.floor, r.grantsBefore, r.maxBefore, len(w.grants), r.reissued, r.badWrites)
	require.Zero(w.t, r.reissued, "tokens re-issued")
	require.Zero(w.t, r.badWrites, "writes accepted under a re-issued token")
	require.Zero(w.t, r.refusedAfterW, "no grant refused once the new primary accepts writes: the Manager checks the floor in the refused call")
	require.Positive(w.t, r.checks, "the Manager checked the floor on the new node")
	// Every claim granted before the event is refused now: each key has
	// been written since under a larger token.
	w.mu.Lock()
	old := append([]grant(nil), w.grants...)
	w.mu.Unlock()
	sort.Slice(old, func(i, j int) bool { return old[i].at.Before(old[j].at) })
	refused := 0
	var checked int
	for _, g := range old {
		if !g.at.Before(r.writableAt) {
			break
		}
		checked++
		err := w.write(g.key, g.claim)
		if _, stale := fence.IsStale(err); stale || errors.Is(err, fence.ErrTokenReused) {
			refused++
		}
	}
	require.Equal(w.t, checked, refused, "every claim granted before the event is refused after recovery")
}

func (w *world) primaryName() string {
	if n := w.c.Primary(); n != nil {
		return n.Name
	}
	return ""
}

// oldNode is the identity of the primary before the event.
func (w *world) oldNode() string {
	w.t.Helper()
	w.c.waitFor(30*time.Second, "a probe write", func() bool { return w.lastProbe().node != "" })
	return w.lastProbe().node
}

// TestPatroni runs each case on its own cluster.
func TestPatroni(t *testing.T) {
	t.Run("crash", func(t *testing.T) {
		w := newWorld(t, Options{})
		w.start()
		w.waitGrants(2*keys, time.Minute)
		old := w.oldNode()
		at := time.Now()
		w.c.CrashPostmaster(w.c.Nodes[0])
		r := w.measure("postmaster crash (Patroni restarts and promotes the same node)", at, old)
		require.Equal(t, "node0", w.primaryName(), "the same node leads again")
		w.verify(r)
	})
	t.Run("crash_haproxy", func(t *testing.T) {
		w := newWorld(t, Options{HAProxy: true})
		w.start()
		w.waitGrants(2*keys, time.Minute)
		old := w.oldNode()
		at := time.Now()
		w.c.CrashPostmaster(w.c.Nodes[0])
		r := w.measure("postmaster crash, clients through HAProxy", at, old)
		require.Equal(t, "node0", w.primaryName())
		w.verify(r)
	})
	t.Run("switchover", func(t *testing.T) {
		w := newWorld(t, Options{})
		w.start()
		w.waitGrants(2*keys, time.Minute)
		old := w.oldNode()
		at := time.Now()
		w.c.Switchover(w.c.Nodes[0], w.c.Nodes[1])
		r := w.measure("planned switchover", at, old)
		require.Equal(t, "node1", w.primaryName())
		w.verify(r)
	})
	t.Run("failover_async", func(t *testing.T) {
		w := newWorld(t, Options{})
		w.start()
		w.waitGrants(2*keys, time.Minute)
		old := w.oldNode()
		// The standby stops receiving WAL; the primary goes on granting
		// (asynchronous replication), then dies with those grants.
		w.c.Nodes[0].Link.Blackhole()
		w.waitGrants(2*keys, time.Minute)
		at := time.Now()
		w.c.KillNode(w.c.Nodes[0])
		w.c.Nodes[0].Link.Cut()
		r := w.measure("leader lost, asynchronous standby promoted", at, old)
		require.Equal(t, "node1", w.primaryName())
		require.NotEmpty(t, r.advancedFrom, "grants were lost: the check advanced the sequence past the marks")
		w.verify(r)
	})
	t.Run("failover_sync", func(t *testing.T) {
		w := newWorld(t, Options{Sync: true})
		w.start()
		w.waitGrants(2*keys, time.Minute)
		old := w.oldNode()
		at := time.Now()
		w.c.KillNode(w.c.Nodes[0])
		r := w.measure("leader lost, synchronous standby promoted (synchronous_mode)", at, old)
		require.Equal(t, "node1", w.primaryName())
		require.Empty(t, r.advancedFrom, "nothing lost: no advance needed")
		w.verify(r)
	})
}
