package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// renewMatch singles out the renewer's batch statements in a Counter.
const renewMatch = "unnest($1::text[], $2::text[], $3::text[]::uuid[])"

// renewalScale is the number of leases held by one Manager and the
// renewal periods measured in steady state.
func (e *Env) renewalScale() (leases, periods int) {
	if e.Quick {
		return 5000, 1
	}
	return 100000, 3
}

// Renewal holds many leases in one Manager in per-lease renewal mode
// (lease.RenewalPerLease; TTL 15 s, RenewEvery 3 s) and
// measures, over whole renewal periods in steady state, the share of each
// period during which a renewal statement was in flight, the statements
// per period, time per lease and heap per held lease; then that taking one
// lease over behind the Manager's back cancels exactly that lease, and the
// speedup of batches over one statement per lease.
func Renewal(e *Env) error {
	schema, drop, err := e.schema(migrations.Lease)
	if err != nil {
		return err
	}
	defer drop()
	c := NewCounter(renewMatch)
	const renewEvery = 3 * time.Second
	pool, err := e.pool(8, c)
	if err != nil {
		return err
	}
	defer pool.Close()
	m, err := lease.New(lease.Config{Pool: pool, Schema: schema, TTL: 15 * time.Second, RenewEvery: renewEvery,
		Renewal: lease.RenewalPerLease}) // the per-lease baseline; the heartbeat case measures the default
	if err != nil {
		return err
	}
	defer m.Close()
	n, periods := e.renewalScale()
	ctx := e.Ctx
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	leases := make([]*lease.Lease, n)
	var wg sync.WaitGroup
	var firstErr atomic.Value
	t0 := time.Now()
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				l, err := m.Acquire(ctx, lease.Key{AccountID: "r", SessionID: fmt.Sprintf("s%06d", i)})
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
		return fmt.Errorf("acquire %d leases: %w", n, err)
	}
	acquireTime := time.Since(t0)
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	heap := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
	e.Report.Add(Metric{Key: "heap_bytes_per_lease", Value: heap, Unit: "B", Target: 1024, Cmp: AtMost,
		Note: fmt.Sprintf("HeapAlloc after GC, %d held leases (incl. the bench's slice)", n)})
	e.logf("renewal: %d leases acquired in %v", n, acquireTime.Round(time.Millisecond))

	// Steady state: one period to settle, then whole periods recorded.
	st := measureSteadyRenewal(c, renewEvery, periods)
	window, perPeriod := st.window, st.perPeriod
	stmts, stmtTime, renewed := st.stmts, st.stmtTime, st.rows
	bs := Summarize(st.periods)
	e.Report.Add(Metric{Key: "renew_busy_fraction", Value: float64(st.busy) / float64(window), Unit: "period", Target: 0.10, Cmp: AtMost, Spread: &bs,
		Note: fmt.Sprintf("share of each %v period with a renewal statement in flight, %d leases, %d periods", renewEvery, n, periods)})
	e.Report.Add(Metric{Key: "renew_leases", Value: float64(n), Unit: "leases"})
	e.Report.Add(Metric{Key: "renew_statements_per_period", Value: perPeriod, Unit: "stmts"})
	e.Report.Add(Metric{Key: "renew_leases_per_statement", Value: float64(renewed) / float64(max(stmts, 1)), Unit: "leases", Target: 500, Cmp: AtLeast,
		Note: fmt.Sprintf("%d batch statements renewed %d leases in %.2f periods", stmts, renewed, float64(window)/float64(renewEvery))})
	e.Report.Add(Metric{Key: "renew_wall_us_per_lease", Value: float64(st.busy) / 1e3 / float64(max(renewed, 1)), Unit: "µs",
		Note: "renewal wall time (statements in flight, overlapping counted once) per lease renewed"})
	batchPerLease := float64(stmtTime) / float64(max(renewed, 1))
	e.Report.Add(Metric{Key: "renew_statement_us_per_lease", Value: batchPerLease / 1e3, Unit: "µs", Note: "summed statement time per lease renewed"})

	// Take one lease over behind the Manager's back: another run now holds it.
	victim := leases[n/2]
	q := pgx.Identifier{schema}.Sanitize()
	if _, err := pool.Exec(ctx, `UPDATE `+q+`.fencekit_leases SET run_id = $3, fence_token = nextval('`+q+`.fencekit_token_seq')
WHERE account_id = $1 AND session_id = $2`, "r", victim.Key().SessionID, uuid.New()); err != nil {
		return err
	}
	tv := time.Now()
	select {
	case <-victim.Done():
	case <-time.After(3 * renewEvery):
		return fmt.Errorf("taken-over lease not cancelled within %v", 3*renewEvery)
	}
	// One more full period: every other lease was renewed since.
	time.Sleep(renewEvery + renewEvery/4 - time.Since(tv)%renewEvery)
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
	e.Report.Add(Metric{Key: "renew_lost_exactly_one", Value: exact, Unit: "bool", Target: 1, Cmp: AtLeast, Note: fmt.Sprintf("%d of %d contexts cancelled after one lease was taken over", cancelled, n)})

	// One statement per lease: Lease.Renew on a sample of the leases.
	k := 1000
	if e.Quick {
		k = 500
	}
	ts := time.Now()
	for i := range k {
		if i == n/2 {
			continue
		}
		if _, err := leases[i].Renew(ctx); err != nil {
			return fmt.Errorf("renew: %w", err)
		}
	}
	single := float64(time.Since(ts)) / float64(k)
	e.Report.Add(Metric{Key: "renew_batch_speedup", Value: single / batchPerLease, Unit: "x", Note: fmt.Sprintf("Lease.Renew %.0f µs/lease vs batch %.1f µs/lease (statement time)", single/1e3, batchPerLease/1e3)})
	runtime.KeepAlive(leases)
	return nil
}
