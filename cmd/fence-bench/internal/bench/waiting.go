package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// Handover measures the time from a holder's release until a waiter holds
// the key: the NOTIFY path (AcquireWait) and polling only (Acquire retried
// every pollEvery), alternating sample by sample.
func Handover(e *Env) error {
	schema, drop, err := e.schema(migrations.Lease)
	if err != nil {
		return err
	}
	defer drop()
	ctx := e.Ctx
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
	if e.Quick {
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
	e.Report.Add(Metric{Key: "handover_p50_ms", Value: Ms(Percentile(notify, 50)), Unit: "ms", Target: 20, Cmp: AtMost, Note: fmt.Sprintf("AcquireWait (LISTEN/NOTIFY), n=%d", len(notify))})
	e.Report.Add(Metric{Key: "handover_p99_ms", Value: Ms(Percentile(notify, 99)), Unit: "ms", Target: 100, Cmp: AtMost})
	e.Report.Add(Metric{Key: "handover_polling_p50_ms", Value: Ms(Percentile(poll, 50)), Unit: "ms", Note: fmt.Sprintf("Acquire retried every %v, n=%d", pollEvery, len(poll))})
	e.Report.Add(Metric{Key: "handover_polling_p99_ms", Value: Ms(Percentile(poll, 99)), Unit: "ms"})
	e.Series = append(e.Series, Series{Name: "notify", Samples: notify}, Series{Name: "poll 50ms", Samples: poll})
	return nil
}

// Contention measures 64 contenders (AcquireWait) on one key, each holding briefly;
// statements per successful acquisition, transactions per acquisition and
// PostgreSQL CPU.
func Contention(e *Env) error {
	schema, drop, err := e.schema(migrations.Lease)
	if err != nil {
		return err
	}
	defer drop()
	c := NewCounter("")
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
	if e.Quick {
		dur = 3 * time.Second
	}
	ctx, cancel := context.WithTimeout(e.Ctx, dur)
	defer cancel()
	x0, err := xactCommits(e.Ctx, obs)
	if err != nil {
		return err
	}
	cpu0, cpuErr := postgresCPU()
	s0 := c.Statements()
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
	stmts := c.Statements() - s0
	cpu1, _ := postgresCPU()
	x1, err := xactCommits(e.Ctx, obs)
	if err != nil {
		return err
	}
	a := float64(acquired.Load())
	e.Report.Add(Metric{Key: "contention_acquisitions_per_s", Value: a / el.Seconds(), Unit: "1/s", Note: fmt.Sprintf("%d contenders, %d managers, one key, hold 2ms", contenders, managers)})
	e.Report.Add(Metric{Key: "contention_statements_per_acquisition", Value: float64(stmts) / a, Unit: "stmts", Note: "client statements (pgx tracer), incl. release"})
	e.Report.Add(Metric{Key: "contention_xacts_per_acquisition", Value: float64(x1-x0) / a, Unit: "xacts", Note: "pg_stat_database commits+rollbacks (whole database)"})
	if cpuErr == nil {
		e.Report.Add(Metric{Key: "contention_pg_cpu_cores", Value: (cpu1 - cpu0).Seconds() / el.Seconds(), Unit: "cores", Note: "postgres processes /proc utime+stime (includes other load on the server)"})
	}
	return nil
}
