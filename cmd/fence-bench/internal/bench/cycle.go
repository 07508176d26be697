package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// cycleWorkers is the number of concurrent workers of every side of the
// lease cycle comparison; each works on its own 64 keys.
const cycleWorkers = 8

// CycleWorkerCounts are the worker counts at which the lease cycle case
// also compares fencekit with the seed alone (cycleWorkers runs every
// side); their pool has the largest count's connections.
var CycleWorkerCounts = []int{1, 32}

// errNotGranted: a cycle's acquire or release did not take effect although
// the worker's keys are its own.
var errNotGranted = errors.New("statement returned no row")

// sqlCycle runs one acquire and one release of st through pool on the key
// (account, session) with a fresh run_id; each must return a row.
func sqlCycle(ctx context.Context, pool *pgxpool.Pool, st cycleSQL, args func(run uuid.UUID) [2][]any) error {
	a := args(uuid.New())
	for i, sql := range []string{st.acquire, st.release} {
		if err := returnsRow(ctx, pool, sql, a[i]...); err != nil {
			return err
		}
	}
	return nil
}

// returnsRow runs sql and reports errNotGranted when it returns no row.
func returnsRow(ctx context.Context, pool *pgxpool.Pool, sql string, args ...any) error {
	rows, err := pool.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	got := rows.Next()
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if !got {
		return errNotGranted
	}
	return nil
}

// cycleRounds is the number of alternating rounds of the lease cycle
// comparison, each side's duration per round, and the warm-up per side.
func (e *Env) cycleRounds() (int, time.Duration, time.Duration) {
	if e.Quick {
		return 4, 250 * time.Millisecond, 150 * time.Millisecond
	}
	return 40, 250 * time.Millisecond, 300 * time.Millisecond
}

// LeaseCycle compares one lease cycle (Manager.Acquire + Lease.Release) on
// distinct keys by 8 workers with, in the same run and alternating round
// by round: the design note's UPSERT + DELETE on its own table (seed), the
// same with the row kept (keep_row), fencekit's table driven by plain
// statements (raw), raw with a NOTIFY in the release (raw_notify), and
// cirello.io/pglock (Acquire FailIfLocked + Release) in the peer
// subprocess. Then, at each of CycleWorkerCounts, the lease cycle against
// the seed alone, the two alternating round by round. Each figure is the
// median over rounds of the per-round rate or ratio, with its spread.
func LeaseCycle(e *Env) error {
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
	size := min(budget, slices.Max(append([]int{cycleWorkers}, CycleWorkerCounts...)))
	pool, err := e.pool(int32(size), nil) //nolint:gosec // at most 32
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
	const ttl = 15.0 // seconds, as the Manager's default TTL
	seed, keep, raw := seedSQL(q), keepRowSQL(q), rawSQL(q)
	rawNotify := raw
	rawNotify.release += `, pg_notify('fencekit_bench_x', 'y')`
	seedArgs := func(prefix string, w, i int) func(uuid.UUID) [2][]any {
		sid := fmt.Sprintf("%s%d-%d", prefix, w, i%64)
		return func(run uuid.UUID) [2][]any {
			return [2][]any{{"a", sid, run, ttl}, {"a", sid, run}}
		}
	}
	rawArgs := func(prefix string, w, i int) func(uuid.UUID) [2][]any {
		sid := fmt.Sprintf("%s%d-%d", prefix, w, i%64)
		return func(run uuid.UUID) [2][]any { return [2][]any{{"a", sid, run}, {"a", sid, run}} }
	}
	sqlSide := func(workers int, name, prefix string, st cycleSQL, args func(string, int, int) func(uuid.UUID) [2][]any) Side {
		return Side{Name: name, Run: func(d time.Duration) (int, time.Duration, error) {
			return Parallel(workers, d, func(w, i int) error { return sqlCycle(ctx, pool, st, args(prefix, w, i)) })
		}}
	}
	leaseSide := func(workers int) Side {
		return Side{Name: "lease", Run: func(d time.Duration) (int, time.Duration, error) {
			return Parallel(workers, d, func(w, i int) error {
				l, err := m.Acquire(ctx, lease.Key{AccountID: "a", SessionID: fmt.Sprintf("w%d-%d", w, i%64)})
				if err != nil {
					return err
				}
				_, err = l.Release(ctx)
				return err
			})
		}}
	}
	sides := []Side{
		leaseSide(cycleWorkers),
		sqlSide(cycleWorkers, "seed", "s", seed, seedArgs),
		sqlSide(cycleWorkers, "keep_row", "k", keep, seedArgs),
		sqlSide(cycleWorkers, "raw", "r", raw, rawArgs),
		sqlSide(cycleWorkers, "raw_notify", "n", rawNotify, rawArgs),
	}
	peerNote := ""
	if e.PeerDir != "" {
		peer, err := StartPeer(ctx, e.PeerDir, e.DBURL, q+".pglock_locks", cycleWorkers)
		if err != nil {
			peerNote = err.Error()
		} else {
			defer peer.Close()
			sides = append(sides, Side{Name: "pglock", Run: peer.Run})
		}
	} else {
		peerNote = "no peer directory"
	}
	rounds, dur, warm := e.cycleRounds()
	res, err := Alternate(sides, rounds, dur, warm)
	if err != nil {
		return err
	}
	how := fmt.Sprintf("%d workers on a pool of %d, distinct keys, %d rounds x %v per side, order rotated", cycleWorkers, size, rounds, dur)
	ratio := func(key, b, a, note string, target float64, cmp Cmp) {
		s := res.Ratio(b, a)
		e.Report.Add(Metric{Key: key, Value: s.Median, Unit: "x", Target: target, Cmp: cmp, Note: note, Spread: &s})
	}
	rate := func(key, side, note string) {
		s := res.Rate(side)
		e.Report.Add(Metric{Key: key, Value: s.Median, Unit: "1/s", Note: note, Spread: &s})
	}
	ratio("lease_cycle_ratio_vs_seed", "lease", "seed", "fencekit Acquire+Release vs the design note's UPSERT+DELETE on its own table; "+how, 0.90, AtLeast)
	ratio("lease_cycle_ratio_vs_keep_row", "lease", "keep_row", "fencekit vs the seed keeping the row (UPDATE … SET released_at)", 0, None)
	ratio("keep_row_ratio_vs_seed", "keep_row", "seed", "keeping the row instead of DELETE", 0, None)
	ratio("raw_ratio_vs_seed", "raw", "seed", "plain statements on fencekit's table vs the seed", 0, None)
	ratio("lease_cycle_ratio_vs_raw", "lease", "raw", "fencekit vs plain statements on fencekit's table", 0, None)
	ratio("lease_cycle_ratio_vs_raw_notify", "lease", "raw_notify", "fencekit vs raw+NOTIFY", 0, None)
	if peerNote == "" {
		ratio("pglock_ratio_vs_seed", "pglock", "seed", "cirello.io/pglock v1.16.1 Acquire(FailIfLocked)+Release, peer process", 0, None)
		ratio("lease_cycle_ratio_vs_pglock", "lease", "pglock", "fencekit vs pglock", 0, None)
	} else {
		for _, k := range []string{"pglock_ratio_vs_seed", "lease_cycle_ratio_vs_pglock", "pglock_cycles_per_s"} {
			e.Report.Add(Metric{Key: k, Value: math.NaN(), Note: "pglock peer: " + peerNote})
		}
	}
	rate("lease_cycles_per_s", "lease", "")
	rate("seed_cycles_per_s", "seed", "")
	rate("keep_row_cycles_per_s", "keep_row", "")
	rate("raw_cycles_per_s", "raw", "")
	rate("raw_notify_cycles_per_s", "raw_notify", "raw floor with pg_notify in the release")
	if peerNote == "" {
		rate("pglock_cycles_per_s", "pglock", "")
	}
	for _, w := range CycleWorkerCounts {
		res, err := Alternate([]Side{leaseSide(w), sqlSide(w, "seed", "s", seed, seedArgs)}, rounds, dur, warm)
		if err != nil {
			return fmt.Errorf("%d workers: %w", w, err)
		}
		r, l, s := res.Ratio("lease", "seed"), res.Rate("lease"), res.Rate("seed")
		e.Report.Add(Metric{Key: fmt.Sprintf("lease_cycle_ratio_vs_seed_w%d", w), Value: r.Median, Unit: "x", Target: 0.90, Cmp: AtLeast, Spread: &r,
			Note: fmt.Sprintf("as lease_cycle_ratio_vs_seed at %d workers on a pool of %d, the two sides alone, %d rounds x %v per side alternating", w, size, rounds, dur)})
		e.Report.Add(Metric{Key: fmt.Sprintf("lease_cycles_per_s_w%d", w), Value: l.Median, Unit: "1/s", Spread: &l,
			Note: fmt.Sprintf("seed in the same rounds: median %.4g/s", s.Median)})
		e.logf("lease_cycle: %d workers: lease %.0f/s, seed %.0f/s, ratio %.3f", w, l.Median, s.Median, r.Median)
	}
	return nil
}
