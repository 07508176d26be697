package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// heartbeatMatch singles out the heartbeat statement in a Counter.
const heartbeatMatch = "SET renewed_at = n.t, expires_at = n.t + $2::bigint"

// heartbeatLeases is the number of leases the heartbeat case holds.
func (e *Env) heartbeatLeases() int {
	switch {
	case e.HeartbeatLeases > 0:
		return e.HeartbeatLeases
	case e.Quick:
		return 20000
	}
	return 1000000
}

// Heartbeat holds N leases (Env.HeartbeatLeases) in one Manager in heartbeat
// mode (the default; TTL 15 s, RenewEvery 3 s), granted by Acquire from
// parallel callers, and measures the heap per held lease, the heartbeat
// statements per renewal period and the share of each period the heartbeat
// statement was in flight; then a Takeover of one key from another Manager
// (exactly one lease cancelled, with ErrTakenOver), and the heartbeat
// expired from another connection (the other N − 1 cancelled, with ErrLost,
// at the next heartbeat).
func Heartbeat(e *Env) error {
	schema, drop, err := e.schema(migrations.Lease)
	if err != nil {
		return err
	}
	defer drop()
	c := NewCounter(heartbeatMatch)
	const renewEvery = 3 * time.Second
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
	n := e.heartbeatLeases()
	periods := 3
	if e.Quick {
		periods = 2
	}
	ctx := e.Ctx
	// Keys are built before the baseline so that their strings (the
	// caller's) are not counted as the Manager's heap.
	keys := make([]lease.Key, n)
	for i := range keys {
		keys[i] = lease.Key{AccountID: "h", SessionID: fmt.Sprintf("s%07d", i)}
	}
	leases := make([]*lease.Lease, n)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	const acquirers = 24
	var wg sync.WaitGroup
	var firstErr atomic.Value
	t0 := time.Now()
	for w := range acquirers {
		wg.Go(func() {
			for i := w; i < n; i += acquirers {
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
		return fmt.Errorf("acquire %d leases: %w", n, err)
	}
	acquireTime := time.Since(t0)
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	heap := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
	e.Report.Add(Metric{Key: "hb_leases", Value: float64(n), Unit: "leases"})
	e.Report.Add(Metric{Key: "hb_acquire_per_s", Value: float64(n) / acquireTime.Seconds(), Unit: "/s",
		Note: fmt.Sprintf("%d leases granted one Acquire at a time by %d parallel callers in %v", n, acquirers, acquireTime.Round(time.Millisecond))})
	e.Report.Add(Metric{Key: "hb_heap_bytes_per_lease", Value: heap, Unit: "B", Target: 700, Cmp: AtMost,
		Note: fmt.Sprintf("HeapAlloc after GC, %d held leases, heartbeat mode (incl. the bench's slice of leases, not the keys)", n)})
	e.logf("heartbeat: %d leases acquired in %v", n, acquireTime.Round(time.Millisecond))

	// Steady state: one period to settle, then whole periods recorded.
	st := measureSteadyRenewal(c, renewEvery, periods)
	window, perPeriod := st.window, st.perPeriod
	bs := Summarize(st.periods)
	e.Report.Add(Metric{Key: "hb_statements_per_period", Value: perPeriod, Unit: "stmts", Target: 1, Cmp: AtMost,
		Note: fmt.Sprintf("heartbeat statements per %v period keeping %d leases, %d periods", renewEvery, n, periods)})
	e.Report.Add(Metric{Key: "hb_busy_fraction", Value: float64(st.busy) / float64(window), Unit: "period", Target: 0.01, Cmp: AtMost, Spread: &bs,
		Note: fmt.Sprintf("share of each %v period with the heartbeat statement in flight, %d leases", renewEvery, n)})
	for _, l := range leases {
		if l.Err() != nil {
			return fmt.Errorf("lease %s ended in steady state: %w", l.Key(), l.Err())
		}
	}

	// One row taken over by another Manager: exactly that lease ends.
	other, err := lease.New(lease.Config{Pool: pool, Schema: schema, TTL: 15 * time.Second, RenewEvery: renewEvery})
	if err != nil {
		return err
	}
	defer other.Close()
	victim := leases[n/2]
	if _, err := other.Takeover(ctx, victim.Key()); err != nil {
		return err
	}
	select {
	case <-victim.Done():
	case <-time.After(3 * renewEvery):
		return fmt.Errorf("taken-over lease not cancelled within %v", 3*renewEvery)
	}
	time.Sleep(renewEvery + renewEvery/4) // one more heartbeat
	cancelled := countEnded(leases)
	exact := 0.0
	if cancelled == 1 && errors.Is(context.Cause(victim.Context()), lease.ErrTakenOver) {
		exact = 1
	}
	e.Report.Add(Metric{Key: "hb_takeover_cancelled", Value: float64(cancelled), Unit: "leases", Target: 1, Cmp: AtMost,
		Note: fmt.Sprintf("contexts cancelled after another Manager took one of %d keys over (exactly that one, ErrTakenOver: %v)", n, exact == 1)})

	// The heartbeat expired from another connection: every other lease ends
	// at the next heartbeat.
	q := pgx.Identifier{schema}.Sanitize()
	te := time.Now()
	if _, err := pool.Exec(ctx, `UPDATE `+q+`.fencekit_managers SET expires_at = clock_timestamp()
WHERE expires_at > clock_timestamp() AND manager_id IN (SELECT manager_id FROM `+q+`.fencekit_leases WHERE account_id = $1 AND session_id = $2)`,
		"h", leases[0].Key().SessionID); err != nil {
		return err
	}
	deadline := time.Now().Add(20 * renewEvery)
	for countEnded(leases) < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	ended := time.Since(te)
	e.Report.Add(Metric{Key: "hb_expiry_cancel_s", Value: ended.Seconds(), Unit: "s",
		Note: fmt.Sprintf("from expiring the heartbeat to every one of %d contexts cancelled (the next heartbeat, within %v, then one goroutine ending them)", n, renewEvery)})
	lost := 0
	for _, l := range leases {
		if l != victim && errors.Is(context.Cause(l.Context()), lease.ErrLost) {
			lost++
		}
	}
	e.Report.Add(Metric{Key: "hb_expiry_cancelled", Value: float64(lost), Unit: "leases", Target: float64(n - 1), Cmp: AtLeast,
		Note: fmt.Sprintf("contexts cancelled with ErrLost after the heartbeat was expired, within %v", ended.Round(time.Millisecond))})
	runtime.KeepAlive(leases)
	return nil
}

func countEnded(ls []*lease.Lease) int {
	k := 0
	for _, l := range ls {
		if l.Err() != nil {
			k++
		}
	}
	return k
}
