package bench

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// Growth is what the growth case measured, for the chart: the lease cycle
// at growing worker counts and the renewal of growing numbers of held
// leases. A cost that grows faster than the load shows as a bend.
type Growth struct {
	Cycle   []CyclePoint
	Renewal []RenewalPoint
}

// CyclePoint is the lease cycle at one worker count: fencekit's and the
// seed's cycles per second and their per-round ratio, over the rounds.
type CyclePoint struct {
	Workers, Pool int
	Lease, Seed   Spread // cycles per second
	Ratio         Spread // lease over seed, per round
}

// RenewalPoint is one Manager in heartbeat mode holding Leases leases.
type RenewalPoint struct {
	Leases       int
	Busy         Spread  // share of each period with the heartbeat in flight
	StmtMsPer    float64 // heartbeat statement time per period, ms
	PerPeriod    float64 // heartbeat statements per period
	HeapPerLease float64 // bytes
	GrantPerS    float64 // Acquire calls per second while growing to Leases
}

// GrowthWorkers are the worker counts of the lease cycle growth.
var GrowthWorkers = []int{1, 8, 32, 128}

// growthLeases are the held-lease counts of the renewal growth; the
// million only with Env.GrowthMillion.
func (e *Env) growthLeases() []int {
	switch {
	case e.Quick:
		return []int{2000, 10000}
	case e.GrowthMillion:
		return []int{10000, 100000, 1000000}
	}
	return []int{10000, 100000}
}

// connBudget is how many connections the bench may open on the server:
// max_connections less the superuser reserve, the connections open now
// and a margin of 10 for the server's other users.
func connBudget(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var maxConns, reserved, open int
	err := pool.QueryRow(ctx, `SELECT current_setting('max_connections')::int,
current_setting('superuser_reserved_connections')::int,
(SELECT count(*) FROM pg_stat_activity)::int`).Scan(&maxConns, &reserved, &open)
	if err != nil {
		return 0, err
	}
	return ConnBudget(maxConns, reserved, open), nil
}

// ConnBudget is max_connections less the superuser reserve, the open
// connections and a margin of 10 for other users, at least 1.
func ConnBudget(maxConns, reserved, open int) int {
	return max(1, maxConns-reserved-open-10)
}

// GrowthCase measures how fencekit's costs grow with the load: the lease
// cycle (Manager.Acquire + Lease.Release on distinct keys) against the
// design note's UPSERT + DELETE at 1, 8, 32 and 128 workers, the two
// alternating round by round at each count, through one pool sized to
// what the server's max_connections leaves free (ConnBudget, at most 128);
// then one Manager in heartbeat mode grown to 10,000 and 100,000 held
// leases (and 1,000,000 with -growth.million), measuring at each size the
// heartbeat's share of the renewal period, its statement time and the heap
// per lease. The figures go to the report and, for the chart, to e.Growth.
func GrowthCase(e *Env) error {
	g := &Growth{}
	e.Growth = g
	if err := growthCycle(e, g); err != nil {
		return err
	}
	return growthRenewal(e, g)
}

func growthCycle(e *Env, g *Growth) error {
	schema, drop, err := e.schema(migrations.Lease)
	if err != nil {
		return err
	}
	defer drop()
	ctx := e.Ctx
	probe, err := e.pool(1, nil)
	if err != nil {
		return err
	}
	budget, err := connBudget(ctx, probe)
	probe.Close()
	if err != nil {
		return err
	}
	size := min(budget, GrowthWorkers[len(GrowthWorkers)-1])
	pool, err := e.pool(int32(size), nil) //nolint:gosec // at most 128
	if err != nil {
		return err
	}
	defer pool.Close()
	q := pgx.Identifier{schema}.Sanitize()
	if _, err := pool.Exec(ctx, seedDDL(q)); err != nil {
		return fmt.Errorf("seed tables: %w", err)
	}
	m, err := lease.New(lease.Config{Pool: pool, Schema: schema})
	if err != nil {
		return err
	}
	defer m.Close()
	seed := seedSQL(q)
	const ttl = 15.0
	rounds, dur, warm := 10, 250*time.Millisecond, 300*time.Millisecond
	if e.Quick {
		rounds, dur, warm = 3, 200*time.Millisecond, 100*time.Millisecond
	}
	for _, w := range GrowthWorkers {
		sides := []Side{
			{Name: "lease", Run: func(d time.Duration) (int, time.Duration, error) {
				return Parallel(w, d, func(k, i int) error {
					l, err := m.Acquire(ctx, lease.Key{AccountID: "g", SessionID: fmt.Sprintf("w%d-%d-%d", w, k, i%64)})
					if err != nil {
						return err
					}
					_, err = l.Release(ctx)
					return err
				})
			}},
			{Name: "seed", Run: func(d time.Duration) (int, time.Duration, error) {
				return Parallel(w, d, func(k, i int) error {
					sid := fmt.Sprintf("w%d-%d-%d", w, k, i%64)
					return sqlCycle(ctx, pool, seed, func(run uuid.UUID) [2][]any {
						return [2][]any{{"g", sid, run, ttl}, {"g", sid, run}}
					})
				})
			}},
		}
		res, err := Alternate(sides, rounds, dur, warm)
		if err != nil {
			return fmt.Errorf("%d workers: %w", w, err)
		}
		p := CyclePoint{Workers: w, Pool: size, Lease: res.Rate("lease"), Seed: res.Rate("seed"), Ratio: res.Ratio("lease", "seed")}
		g.Cycle = append(g.Cycle, p)
		note := fmt.Sprintf("%d workers on a pool of %d (ConnBudget of the server's max_connections), %d rounds x %v per side alternating with the seed", w, size, rounds, dur)
		e.Report.Add(Metric{Key: fmt.Sprintf("growth_cycle_ratio_w%d", w), Value: p.Ratio.Median, Unit: "x", Spread: &p.Ratio,
			Note: "lease cycle over the seed's UPSERT+DELETE; " + note})
		e.Report.Add(Metric{Key: fmt.Sprintf("growth_cycles_per_s_w%d", w), Value: p.Lease.Median, Unit: "1/s", Spread: &p.Lease,
			Note: fmt.Sprintf("lease cycles per second (seed: median %.4g)", p.Seed.Median)})
		e.logf("growth: %d workers: lease %.0f/s, seed %.0f/s", w, p.Lease.Median, p.Seed.Median)
	}
	return nil
}

func growthRenewal(e *Env, g *Growth) error {
	schema, drop, err := e.schema(migrations.Lease)
	if err != nil {
		return err
	}
	defer drop()
	c := NewCounter(heartbeatMatch)
	renewEvery := 3 * time.Second
	if e.Quick {
		renewEvery = time.Second
	}
	pool, err := e.pool(32, c)
	if err != nil {
		return err
	}
	defer pool.Close()
	m, err := lease.New(lease.Config{Pool: pool, Schema: schema, TTL: 15 * time.Second, RenewEvery: renewEvery, Renewal: lease.RenewalHeartbeat})
	if err != nil {
		return err
	}
	defer m.Close()
	sizes := e.growthLeases()
	periods := 2
	if e.Quick {
		periods = 1
	}
	ctx := e.Ctx
	n := sizes[len(sizes)-1]
	keys := make([]lease.Key, n)
	for i := range keys {
		keys[i] = lease.Key{AccountID: "g", SessionID: fmt.Sprintf("s%07d", i)}
	}
	leases := make([]*lease.Lease, n)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	held := 0
	for _, size := range sizes {
		t0 := time.Now()
		if err := acquireRange(ctx, m, keys, leases, held, size); err != nil {
			return err
		}
		grant := float64(size-held) / time.Since(t0).Seconds()
		held = size
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		st := measureSteadyRenewal(c, renewEvery, periods)
		for _, l := range leases[:held] {
			if l.Err() != nil {
				return fmt.Errorf("lease %s ended in steady state at %d leases: %w", l.Key(), held, l.Err())
			}
		}
		p := RenewalPoint{Leases: held, Busy: Summarize(st.periods), PerPeriod: st.perPeriod, GrantPerS: grant,
			HeapPerLease: float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(held)}
		if st.stmts > 0 {
			p.StmtMsPer = Ms(st.stmtTime) / float64(st.stmts) * st.perPeriod
		}
		g.Renewal = append(g.Renewal, p)
		note := fmt.Sprintf("one Manager, heartbeat mode, %d held leases, %d periods of %v", held, periods, renewEvery)
		e.Report.Add(Metric{Key: fmt.Sprintf("growth_hb_busy_%d", held), Value: p.Busy.Median, Unit: "period", Spread: &p.Busy,
			Note: "share of each period with the heartbeat statement in flight; " + note})
		e.Report.Add(Metric{Key: fmt.Sprintf("growth_hb_stmt_ms_%d", held), Value: p.StmtMsPer, Unit: "ms",
			Note: fmt.Sprintf("heartbeat statement time per period (%.3g statements per period)", p.PerPeriod)})
		e.Report.Add(Metric{Key: fmt.Sprintf("growth_heap_bytes_per_lease_%d", held), Value: p.HeapPerLease, Unit: "B",
			Note: "HeapAlloc after GC per held lease (incl. the bench's slice of leases, not the keys)"})
		e.Report.Add(Metric{Key: fmt.Sprintf("growth_grant_per_s_%d", held), Value: grant, Unit: "1/s",
			Note: "Acquire calls per second by 24 parallel callers while growing to this size"})
		e.logf("growth: %d leases: busy %.4g, %.3g ms per period, %.0f B/lease, %.0f grants/s", held, p.Busy.Median, p.StmtMsPer, p.HeapPerLease, grant)
	}
	runtime.KeepAlive(leases)
	return nil
}

// acquireRange grants keys[from:to] with 24 parallel callers into leases.
func acquireRange(ctx context.Context, m *lease.Manager, keys []lease.Key, leases []*lease.Lease, from, to int) error {
	const acquirers = 24
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for w := range acquirers {
		wg.Go(func() {
			for i := from + w; i < to; i += acquirers {
				l, err := m.Acquire(ctx, keys[i])
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				leases[i] = l
			}
		})
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return fmt.Errorf("acquire leases %d to %d: %w", from, to, err)
	}
	return nil
}
