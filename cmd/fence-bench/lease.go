package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/internal/bench"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// rawSQL is the raw floor: a single-statement conditional upsert drawing
// the token, and a run_id-matched release, issued directly through pgxpool.
func rawSQL(q string) (acq, rel string) {
	acq = `INSERT INTO ` + q + `.fencekit_leases AS held
  (account_id, session_id, run_id, fence_token, acquired_at, renewed_at, expires_at, released_at)
VALUES ($1, $2, $3, nextval('` + q + `.fencekit_token_seq'), now(), now(), now() + interval '15 seconds', NULL)
ON CONFLICT (account_id, session_id) DO UPDATE SET run_id = EXCLUDED.run_id,
  fence_token = nextval('` + q + `.fencekit_token_seq'), acquired_at = EXCLUDED.acquired_at,
  renewed_at = EXCLUDED.renewed_at, expires_at = EXCLUDED.expires_at, released_at = NULL
WHERE held.expires_at <= EXCLUDED.acquired_at
RETURNING held.fence_token`
	rel = `UPDATE ` + q + `.fencekit_leases SET released_at = now(), expires_at = now()
WHERE account_id = $1 AND session_id = $2 AND run_id = $3 AND released_at IS NULL`
	return acq, rel
}

// leaseCycle: acquire+release on distinct keys by 8 workers, fencekit vs
// raw, alternating in rounds (ABBA order).
func leaseCycle(e *env) error {
	schema, drop, err := e.schema(migrations.Lease)
	if err != nil {
		return err
	}
	defer drop()
	const workers = 8
	pool, err := e.pool(workers, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	m, err := lease.New(lease.Config{Pool: pool, Schema: schema})
	if err != nil {
		return err
	}
	defer m.Close()
	acq, rel := rawSQL(fmt.Sprintf("%q", schema))
	ctx := e.ctx
	cycleLease := func(w, i int) error {
		l, err := m.Acquire(ctx, lease.Key{AccountID: "a", SessionID: fmt.Sprintf("w%d-%d", w, i%64)})
		if err != nil {
			return err
		}
		_, err = l.Release(ctx)
		return err
	}
	cycleRaw := func(w, i int) error {
		sid, run := fmt.Sprintf("r%d-%d", w, i%64), uuid.New()
		var tok int64
		if err := pool.QueryRow(ctx, acq, "a", sid, run).Scan(&tok); err != nil {
			return err
		}
		_, err := pool.Exec(ctx, rel, "a", sid, run)
		return err
	}
	relNotify := rel + ` RETURNING pg_notify('fencekit_bench_x', 'y')`
	// The raw floor plus the NOTIFY the lease's release sends: attributes the
	// gap between the two to NOTIFY's commit-time serialisation or not.
	cycleRawNotify := func(w, i int) error {
		sid, run := fmt.Sprintf("n%d-%d", w, i%64), uuid.New()
		var tok int64
		if err := pool.QueryRow(ctx, acq, "a", sid, run).Scan(&tok); err != nil {
			return err
		}
		_, err := pool.Exec(ctx, relNotify, "a", sid, run)
		return err
	}
	phase := func(f func(w, i int) error, d time.Duration) (int, time.Duration, error) {
		var n atomic.Int64
		var firstErr atomic.Value
		stop := time.Now().Add(d)
		t0 := time.Now()
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for i := 0; time.Now().Before(stop); i++ {
					if err := f(w, i); err != nil {
						firstErr.CompareAndSwap(nil, err)
						return
					}
					n.Add(1)
				}
			})
		}
		wg.Wait()
		if v := firstErr.Load(); v != nil {
			return 0, 0, v.(error)
		}
		return int(n.Load()), time.Since(t0), nil
	}
	var p, pn bench.Pair
	rounds, dur := e.rounds()
	sides := []func(w, i int) error{cycleRaw, cycleLease, cycleRawNotify}
	for r := range rounds {
		for j := range sides {
			k := (j + r) % len(sides) // rotate the order every round
			n, d, err := phase(sides[k], dur)
			if err != nil {
				return fmt.Errorf("cycle side %d: %w", k, err)
			}
			switch k {
			case 0:
				p.AddA(n, d)
			case 1:
				p.AddB(n, d)
				pn.AddB(n, d)
			case 2:
				pn.AddA(n, d)
			}
		}
	}
	e.rep.Add(bench.Metric{Key: "raw_notify_cycles_per_s", Value: pn.ARate(), Unit: "1/s", Note: "raw floor with pg_notify in the release"})
	e.rep.Add(bench.Metric{Key: "lease_cycle_ratio_vs_raw_notify", Value: pn.ThroughputRatio(), Unit: "x", Note: "fencekit vs raw+NOTIFY"})
	e.rep.Add(bench.Metric{Key: "lease_cycle_ratio_vs_raw", Value: p.ThroughputRatio(), Unit: "x", Target: 0.95, Cmp: bench.AtLeast,
		Note: fmt.Sprintf("%d workers, distinct keys, %d rounds x %v per side", workers, rounds, dur)})
	e.rep.Add(bench.Metric{Key: "raw_cycles_per_s", Value: p.ARate(), Unit: "1/s"})
	e.rep.Add(bench.Metric{Key: "lease_cycles_per_s", Value: p.BRate(), Unit: "1/s"})
	return nil
}

// handover: holder releases → waiter holds. NOTIFY path (AcquireWait) and
// polling-only (Acquire retried every pollEvery), alternating per sample.
func handover(e *env) error {
	schema, drop, err := e.schema(migrations.Lease)
	if err != nil {
		return err
	}
	defer drop()
	ctx := e.ctx
	mk := func() (*lease.Manager, *pgxpool.Pool, error) {
		pool, err := e.pool(4, nil)
		if err != nil {
			return nil, nil, err
		}
		m, err := lease.New(lease.Config{Pool: pool, Schema: schema})
		return m, pool, err
	}
	holder, hp, err := mk()
	if err != nil {
		return err
	}
	defer hp.Close()
	defer holder.Close()
	waiter, wp, err := mk()
	if err != nil {
		return err
	}
	defer wp.Close()
	defer waiter.Close()
	const pollEvery = 50 * time.Millisecond
	n := 60
	if e.quick {
		n = 25
	}
	var notify, poll []time.Duration
	for i := range 2 * n {
		key := lease.Key{AccountID: "h", SessionID: fmt.Sprint(i)}
		l, err := holder.Acquire(ctx, key)
		if err != nil {
			return err
		}
		usePoll := i%2 == 1
		got := make(chan error, 1)
		var gotAt atomic.Int64
		go func() {
			var wl *lease.Lease
			var err error
			if usePoll {
				for {
					wl, err = waiter.Acquire(ctx, key)
					if !errors.Is(err, lease.ErrHeld) {
						break
					}
					time.Sleep(pollEvery)
				}
			} else {
				wl, err = waiter.AcquireWait(ctx, key)
			}
			gotAt.Store(time.Now().UnixNano())
			if err == nil {
				_, err = wl.Release(ctx)
			}
			got <- err
		}()
		// Give the waiter time to be refused once and start waiting (a
		// benchmark pacing delay, not test synchronisation); the random
		// phase of the poller against the release is the point of polling.
		time.Sleep(30*time.Millisecond + time.Duration(i%7)*7*time.Millisecond)
		t0 := time.Now()
		if _, err := l.Release(ctx); err != nil {
			return err
		}
		if err := <-got; err != nil {
			return err
		}
		d := time.Duration(gotAt.Load() - t0.UnixNano())
		if usePoll {
			poll = append(poll, d)
		} else {
			notify = append(notify, d)
		}
	}
	e.rep.Add(bench.Metric{Key: "handover_p50_ms", Value: bench.Ms(bench.Percentile(notify, 50)), Unit: "ms", Target: 20, Cmp: bench.AtMost, Note: fmt.Sprintf("AcquireWait (LISTEN/NOTIFY), n=%d", len(notify))})
	e.rep.Add(bench.Metric{Key: "handover_p99_ms", Value: bench.Ms(bench.Percentile(notify, 99)), Unit: "ms", Target: 100, Cmp: bench.AtMost})
	e.rep.Add(bench.Metric{Key: "handover_polling_p50_ms", Value: bench.Ms(bench.Percentile(poll, 50)), Unit: "ms", Note: fmt.Sprintf("Acquire retried every %v, n=%d", pollEvery, len(poll))})
	e.rep.Add(bench.Metric{Key: "handover_polling_p99_ms", Value: bench.Ms(bench.Percentile(poll, 99)), Unit: "ms"})
	e.series = append(e.series, bench.Series{Name: "notify", Samples: notify}, bench.Series{Name: "poll 50ms", Samples: poll})
	return nil
}

// contention: 64 contenders (AcquireWait) on one key, each holding briefly;
// statements per successful acquisition, transactions per acquisition and
// PostgreSQL CPU.
func contention(e *env) error {
	schema, drop, err := e.schema(migrations.Lease)
	if err != nil {
		return err
	}
	defer drop()
	c := newCounter()
	const managers, contenders = 4, 64
	var ms []*lease.Manager
	var pools []*pgxpool.Pool
	defer func() {
		for _, m := range ms {
			_ = m.Close()
		}
		for _, p := range pools {
			p.Close()
		}
	}()
	for range managers {
		p, err := e.pool(8, c)
		if err != nil {
			return err
		}
		pools = append(pools, p)
		m, err := lease.New(lease.Config{Pool: p, Schema: schema})
		if err != nil {
			return err
		}
		ms = append(ms, m)
	}
	obs, err := e.pool(1, nil)
	if err != nil {
		return err
	}
	defer obs.Close()
	dur := 5 * time.Second
	if e.quick {
		dur = 3 * time.Second
	}
	ctx, cancel := context.WithTimeout(e.ctx, dur)
	defer cancel()
	x0, err := xactCommits(e.ctx, obs)
	if err != nil {
		return err
	}
	cpu0, cpuErr := postgresCPU()
	s0 := c.n.Load()
	t0 := time.Now()
	var acquired atomic.Int64
	var wg sync.WaitGroup
	key := lease.Key{AccountID: "c", SessionID: "hot"}
	for i := range contenders {
		m := ms[i%managers]
		wg.Go(func() {
			for ctx.Err() == nil {
				l, err := m.AcquireWait(ctx, key)
				if err != nil {
					return
				}
				acquired.Add(1)
				time.Sleep(2 * time.Millisecond) // the holder's work
				_, _ = l.Release(context.WithoutCancel(ctx))
			}
		})
	}
	wg.Wait()
	el := time.Since(t0)
	stmts := c.n.Load() - s0
	cpu1, _ := postgresCPU()
	x1, err := xactCommits(e.ctx, obs)
	if err != nil {
		return err
	}
	a := float64(acquired.Load())
	e.rep.Add(bench.Metric{Key: "contention_acquisitions_per_s", Value: a / el.Seconds(), Unit: "1/s", Note: fmt.Sprintf("%d contenders, %d managers, one key, hold 2ms", contenders, managers)})
	e.rep.Add(bench.Metric{Key: "contention_statements_per_acquisition", Value: float64(stmts) / a, Unit: "stmts", Note: "client statements (pgx tracer), incl. release"})
	e.rep.Add(bench.Metric{Key: "contention_xacts_per_acquisition", Value: float64(x1-x0) / a, Unit: "xacts", Note: "pg_stat_database commits+rollbacks (whole database)"})
	if cpuErr == nil {
		e.rep.Add(bench.Metric{Key: "contention_pg_cpu_cores", Value: (cpu1 - cpu0).Seconds() / el.Seconds(), Unit: "cores", Note: "postgres processes /proc utime+stime (includes other load on the server)"})
	}
	return nil
}

// renewal: N live leases in one Manager; statements per renewal, heap per
// lease, batched vs per-lease renewal, and losing exactly one lease.
func renewal(e *env) error {
	schema, drop, err := e.schema(migrations.Lease)
	if err != nil {
		return err
	}
	defer drop()
	c := newCounter("unnest($1::text[], $2::text[], $3::uuid[])")
	const renewEvery = 3 * time.Second
	pool, err := e.pool(8, c)
	if err != nil {
		return err
	}
	defer pool.Close()
	m, err := lease.New(lease.Config{Pool: pool, Schema: schema, TTL: 15 * time.Second, RenewEvery: renewEvery})
	if err != nil {
		return err
	}
	defer m.Close()
	const n = 10000
	ctx := e.ctx
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	leases := make([]*lease.Lease, n)
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				l, err := m.Acquire(ctx, lease.Key{AccountID: "r", SessionID: fmt.Sprintf("s%05d", i)})
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				leases[i] = l
			}
		})
	}
	wg.Wait()
	if v := firstErr.Load(); v != nil {
		return fmt.Errorf("acquire %d leases: %w", n, v.(error))
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	heap := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
	e.rep.Add(bench.Metric{Key: "heap_bytes_per_lease", Value: heap, Unit: "B", Target: 2048, Cmp: bench.AtMost, Note: fmt.Sprintf("HeapAlloc after GC, %d held leases", n)})

	// Take over lease 4242 behind the Manager's back: another run now holds it.
	victim := leases[4242]
	q := fmt.Sprintf("%q", schema)
	if _, err := pool.Exec(ctx, `UPDATE `+q+`.fencekit_leases SET run_id = $3, fence_token = nextval('`+q+`.fencekit_token_seq')
WHERE account_id = $1 AND session_id = $2`, "r", victim.Key().SessionID, uuid.New()); err != nil {
		return err
	}
	// Wait for one full renewal period after the takeover.
	b0, bd0 := c.match["unnest($1::text[], $2::text[], $3::uuid[])"].Load(), c.matchD["unnest($1::text[], $2::text[], $3::uuid[])"].Load()
	t0 := time.Now()
	select {
	case <-victim.Done():
	case <-time.After(3 * renewEvery):
		return fmt.Errorf("taken-over lease not cancelled within %v", 3*renewEvery)
	}
	time.Sleep(renewEvery + renewEvery/4 - time.Since(t0)%renewEvery)
	batches := c.match["unnest($1::text[], $2::text[], $3::uuid[])"].Load() - b0
	batchNs := c.matchD["unnest($1::text[], $2::text[], $3::uuid[])"].Load() - bd0
	cancelled := 0
	for _, l := range leases {
		if l.Err() != nil {
			cancelled++
		}
	}
	exact := 0.0
	if cancelled == 1 && victim.Err() != nil && errors.Is(context.Cause(victim.Context()), lease.ErrLost) {
		exact = 1
	}
	e.rep.Add(bench.Metric{Key: "renew_lost_exactly_one", Value: exact, Unit: "bool", Target: 1, Cmp: bench.AtLeast, Note: fmt.Sprintf("%d of %d contexts cancelled after one lease was taken over", cancelled, n)})
	// renewal statements seen in the window cover every lease at least once
	// (RenewEvery elapsed); leases renewed per statement ≈ n / statements
	// per period.
	periods := float64(time.Since(t0)) / float64(renewEvery)
	perStmt := float64(n) * periods / float64(max(batches, 1))
	e.rep.Add(bench.Metric{Key: "renew_leases_per_statement", Value: perStmt, Unit: "leases", Target: 500, Cmp: bench.AtLeast, Note: fmt.Sprintf("%d batch statements in %.2f renewal periods", batches, periods)})
	batchPerLease := float64(batchNs) / (float64(n) * periods)

	// One statement per lease: Manager.Renew on a sample of the leases.
	k := 1000
	if e.quick {
		k = 500
	}
	ts := time.Now()
	for i := range k {
		if i == 4242 {
			continue
		}
		if err := leases[i].Renew(ctx); err != nil {
			return fmt.Errorf("renew: %w", err)
		}
	}
	single := float64(time.Since(ts)) / float64(k)
	e.rep.Add(bench.Metric{Key: "renew_batch_speedup", Value: single / batchPerLease, Unit: "x", Note: fmt.Sprintf("Lease.Renew %.0f µs/lease vs batch %.1f µs/lease (statement time)", single/1e3, batchPerLease/1e3)})
	runtime.KeepAlive(leases)
	return nil
}
