package bench

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/internal/pgbouncer"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// deployRow is one deployment of the matrix: where the pools connect, in
// which pgx exec mode, and whether the Manager gets a direct LISTEN
// connection (lease.Config.ListenConnString).
type deployRow struct {
	key    string // metric key prefix
	name   string
	bouncr string // "", pgbouncer.ModeSession or pgbouncer.ModeTransaction
	exec   pgx.QueryExecMode
	listen bool
}

var deployRows = []deployRow{
	{key: "direct", name: "direct (cache_statement)", exec: pgx.QueryExecModeCacheStatement},
	{key: "pgb_session", name: "PgBouncer session (cache_statement)", bouncr: pgbouncer.ModeSession, exec: pgx.QueryExecModeCacheStatement},
	{key: "pgb_tx", name: "PgBouncer transaction (exec), no listen connection", bouncr: pgbouncer.ModeTransaction, exec: pgx.QueryExecModeExec},
	{key: "pgb_tx_listen", name: "PgBouncer transaction (exec), direct ListenConnString", bouncr: pgbouncer.ModeTransaction, exec: pgx.QueryExecModeExec, listen: true},
}

// deployment is one row's Managers and pools.
type deployment struct {
	row             deployRow
	raw             *pgxpool.Pool // direct, for reading rows
	schema          string
	holder, other   *lease.Manager
	grant           *lease.Manager // 8 workers' Manager for throughput
	stop            func()
	listenerVerdict lease.ListenerState
}

// Deployment measures, for each row of the deployment matrix (direct;
// PgBouncer in session pooling; PgBouncer in transaction pooling in pgx's
// exec mode, without and with a direct listen connection): the takeover
// notification latency (the Takeover call to the displaced Lease's Done),
// the AcquireWait handover latency (the holder's Release call to the
// waiter's grant) and the grant throughput (8 workers, Acquire+Release on
// distinct keys), the latter alternating rows round by round. Each latency
// sample starts after a random pause below FallbackPoll, so that the polled
// rows are sampled at random phases of the poll. Each row's
// PgBouncer is private, started and stopped by the case
// (internal/pgbouncer); the Managers use the defaults (TTL 15 s, WaitPoll
// 10 s, FallbackPoll 1 s).
func Deployment(e *Env) error {
	schema, drop, err := e.schema(migrations.Lease)
	if err != nil {
		return err
	}
	defer drop()
	cc, err := pgx.ParseConfig(e.DBURL)
	if err != nil {
		return err
	}
	var deps []*deployment
	defer func() {
		for _, d := range deps {
			d.stop()
		}
	}()
	for _, r := range deployRows {
		d, err := e.deploy(r, cc, schema)
		if err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
		deps = append(deps, d)
	}
	samples := 15
	if e.Quick {
		samples = 4
	}
	for _, d := range deps {
		take, hand, err := d.latencies(e.Ctx, samples)
		if err != nil {
			return fmt.Errorf("%s: %w", d.row.name, err)
		}
		note := fmt.Sprintf("%s; listener %s; %d samples", d.row.name, d.listenerVerdict, samples)
		for _, m := range []struct {
			what string
			xs   []time.Duration
		}{{"takeover", take}, {"handover", hand}} {
			e.Report.Add(Metric{Key: "deploy_" + d.row.key + "_" + m.what + "_p50_ms", Value: Ms(Percentile(m.xs, 50)), Unit: "ms", Note: note})
			e.Report.Add(Metric{Key: "deploy_" + d.row.key + "_" + m.what + "_max_ms", Value: Ms(Percentile(m.xs, 100)), Unit: "ms", Note: note})
		}
		e.logf("deployment %s: takeover p50 %.1f ms max %.1f ms, handover p50 %.1f ms max %.1f ms (listener %s)",
			d.row.name, Ms(Percentile(take, 50)), Ms(Percentile(take, 100)), Ms(Percentile(hand, 50)), Ms(Percentile(hand, 100)), d.listenerVerdict)
	}
	rounds, dur := 6, 500*time.Millisecond
	if e.Quick {
		rounds, dur = 2, 300*time.Millisecond
	}
	var sides []Side
	for _, d := range deps {
		sides = append(sides, Side{Name: d.row.key, Run: d.grants})
	}
	res, err := Alternate(sides, rounds, dur, 200*time.Millisecond)
	if err != nil {
		return err
	}
	for _, d := range deps {
		sp := res.Rate(d.row.key)
		e.Report.Add(Metric{Key: "deploy_" + d.row.key + "_grants_per_s", Value: sp.Median, Unit: "1/s", Spread: &sp,
			Note: d.row.name + "; 8 workers, Acquire+Release on distinct keys, rows alternating"})
		if d.row.key != "direct" {
			r := res.Ratio(d.row.key, "direct")
			e.Report.Add(Metric{Key: "deploy_" + d.row.key + "_grants_vs_direct", Value: r.Median, Unit: "x", Spread: &r, Note: "grant throughput over direct's, per round"})
		}
	}
	return nil
}

// deploy starts the row's PgBouncer (if any), its pools and Managers, and
// waits for the listener's verdict (delivering or not).
func (e *Env) deploy(r deployRow, cc *pgx.ConnConfig, schema string) (*deployment, error) {
	d := &deployment{row: r, schema: schema}
	var stops []func()
	d.stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	url := e.DBURL
	if r.bouncr != "" {
		// Session pooling gives each client connection a server connection
		// for its lifetime (3 listeners, 2+2+8 pool connections).
		size := 8
		if r.bouncr == pgbouncer.ModeSession {
			size = 16
		}
		s, err := pgbouncer.Start(e.Ctx, pgbouncer.Config{UpstreamHost: cc.Host, UpstreamPort: cc.Port, User: cc.User, Mode: r.bouncr, PoolSize: size}, cc.Database)
		if err != nil {
			return nil, err
		}
		stops = append(stops, func() { _ = s.Stop() })
		url = s.URL(cc.User, cc.Database)
	}
	mk := func(maxConns int32) (*lease.Manager, error) {
		pc, err := pgxpool.ParseConfig(url)
		if err != nil {
			return nil, err
		}
		pc.MaxConns = maxConns
		pc.ConnConfig.DefaultQueryExecMode = r.exec
		pool, err := pgxpool.NewWithConfig(e.Ctx, pc)
		if err != nil {
			return nil, err
		}
		stops = append(stops, pool.Close)
		cfg := lease.Config{Pool: pool, Schema: schema}
		if r.listen {
			cfg.ListenConnString = e.DBURL
		}
		m, err := lease.New(cfg)
		if err != nil {
			return nil, err
		}
		stops = append(stops, func() { _ = m.Close() })
		return m, nil
	}
	raw, err := e.pool(1, nil)
	if err != nil {
		d.stop()
		return nil, err
	}
	stops = append(stops, raw.Close)
	d.raw = raw
	if d.holder, err = mk(2); err != nil {
		d.stop()
		return nil, err
	}
	if d.other, err = mk(2); err != nil {
		d.stop()
		return nil, err
	}
	if d.grant, err = mk(8); err != nil {
		d.stop()
		return nil, err
	}
	// Start every listener and wait for its verdict.
	for i, m := range []*lease.Manager{d.holder, d.other, d.grant} {
		l, err := m.Acquire(e.Ctx, lease.Key{AccountID: "deploy-warm", SessionID: fmt.Sprintf("%s-%d", r.key, i)})
		if err != nil {
			d.stop()
			return nil, err
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			h := m.Health(e.Ctx)
			if h.Listener == lease.ListenerDelivering || h.Listener == lease.ListenerNotDelivering {
				d.listenerVerdict = h.Listener
				break
			}
			if time.Now().After(deadline) {
				d.stop()
				return nil, fmt.Errorf("listener gave no verdict: %s", h.Listener)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if _, err := l.Release(e.Ctx); err != nil {
			d.stop()
			return nil, err
		}
	}
	return d, nil
}

// latencies measures n takeovers and n handovers, alternating.
func (d *deployment) latencies(ctx context.Context, n int) (take, hand []time.Duration, err error) {
	for i := range n {
		// Takeover: from the Takeover call to the displaced lease's end
		// (the notification often arrives before Takeover returns).
		k := lease.Key{AccountID: "deploy-take-" + d.row.key, SessionID: fmt.Sprint(i)}
		old, err := d.holder.Acquire(ctx, k)
		if err != nil {
			return nil, nil, err
		}
		jitter()
		t0 := time.Now()
		nl, err := d.other.Takeover(ctx, k)
		if err != nil {
			return nil, nil, err
		}
		select {
		case <-old.Done():
			take = append(take, time.Since(t0))
		case <-time.After(30 * time.Second):
			return nil, nil, errors.New("displaced lease not ended within 30 s")
		}
		if cause := old.Err(); !errors.Is(cause, lease.ErrTakenOver) {
			return nil, nil, fmt.Errorf("displaced lease ended with %w", cause)
		}
		if _, err := nl.Release(ctx); err != nil {
			return nil, nil, err
		}

		// Handover: the waiter sleeps in AcquireWait after marking the key
		// contended; from the holder's Release call to the waiter's grant.
		k = lease.Key{AccountID: "deploy-hand-" + d.row.key, SessionID: fmt.Sprint(i)}
		hl, err := d.holder.Acquire(ctx, k)
		if err != nil {
			return nil, nil, err
		}
		type res struct {
			l   *lease.Lease
			at  time.Time
			err error
		}
		got := make(chan res, 1)
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		go func() {
			l, err := d.other.AcquireWait(wctx, k)
			got <- res{l, time.Now(), err}
		}()
		if err := waitContended(ctx, d.raw, d.schema, k); err != nil {
			cancel()
			return nil, nil, err
		}
		jitter()
		t0 = time.Now()
		if _, err := hl.Release(ctx); err != nil {
			cancel()
			return nil, nil, err
		}
		r := <-got
		cancel()
		if r.err != nil {
			return nil, nil, r.err
		}
		hand = append(hand, r.at.Sub(t0))
		if _, err := r.l.Release(ctx); err != nil {
			return nil, nil, err
		}
	}
	return take, hand, nil
}

// jitter sleeps a random time below lease.DefaultFallbackPoll, so that the
// samples fall at random phases of the Managers' polling (which otherwise
// line up with the measurement loop and bias the polled rows).
func jitter() {
	time.Sleep(time.Duration(mrand.Int64N(int64(lease.DefaultFallbackPoll))))
}

// waitContended waits until AcquireWait has flagged the key's row so that
// its release notifies (the waiter is then asleep), reading the row on raw.
func waitContended(ctx context.Context, raw *pgxpool.Pool, schema string, k lease.Key) error {
	q, err := migrations.QuoteIdentifier(schema)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var ok bool
		if err := raw.QueryRow(ctx, `SELECT contended FROM `+q+`.fencekit_leases WHERE account_id = $1 AND session_id = $2`,
			k.AccountID, k.SessionID).Scan(&ok); err != nil {
			return err
		}
		if ok {
			return nil
		}
		time.Sleep(2 * time.Millisecond)
	}
	return errors.New("waiter did not mark the key contended within 30 s")
}

// grants runs 8 workers of Acquire+Release cycles for dur.
func (d *deployment) grants(dur time.Duration) (int, time.Duration, error) {
	return Parallel(8, dur, func(w, i int) error {
		k := lease.Key{AccountID: "deploy-grant-" + d.row.key, SessionID: fmt.Sprintf("%d-%d", w, i%64)}
		l, err := d.grant.Acquire(context.Background(), k)
		if err != nil {
			return err
		}
		_, err = l.Release(context.Background())
		return err
	})
}
