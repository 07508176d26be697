// Command effectsbench measures package effects against its floors for
// fence-bench's effects case (a module of its own so that the main module
// does not depend on river). It prints its metrics as JSON lines on
// stdout and its progress on stderr.
//
//	go run . [-db url] [-quick] [-rounds N]
//
// Three comparisons, each side by side in one run:
//
//   - record: Outbox.Record (its own transaction: the lease-row check and
//     the insert) against the same row inserted through pgguard's InTx,
//     one call per side per round, the order rotated every round; the
//     ratio of p50s per block of rounds, median over blocks (min–max).
//   - delivery: a running Relay and a local HTTP target; the time from a
//     Record's return (its commit) to the target receiving the request,
//     one effect at a time; p50 and p99.
//   - throughput: 200 effects recorded in one transaction, then the time
//     from the commit until the target received all of them, three ways,
//     the order rotated every round: a Relay (16 in flight); river's
//     InsertTx of a job carrying the frozen request and river workers
//     sending it with the same HTTP deliverer (16 workers, no lease check,
//     no claim epoch); and rivereffects (the effect row the source of
//     truth, river's job carrying its id, Relay.DeliverEffect).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/fencekit/fencekit/cmd/fence-bench/internal/bench"
	"github.com/fencekit/fencekit/effects"
	"github.com/fencekit/fencekit/effects/rivereffects"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// batch is how many effects one throughput round records, and inFlight
// the delivery concurrency of every side.
const (
	batch    = 200
	inFlight = 16
)

func main() {
	bench.DBCase("effectsbench", "effects", bench.EffectsKeys, "record rounds of one call per side", run)
}

// target is the benchmark's HTTP target: it counts requests and records
// when each arrived, in order.
type target struct {
	srv     *httptest.Server
	mu      sync.Mutex
	arrived []time.Time
	n       atomic.Int64
	want    atomic.Int64
	done    chan struct{}
}

func newTarget() *target {
	t := &target{done: make(chan struct{}, 1)}
	t.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		now := time.Now()
		t.mu.Lock()
		t.arrived = append(t.arrived, now)
		t.mu.Unlock()
		if t.n.Add(1) == t.want.Load() {
			select {
			case t.done <- struct{}{}:
			default:
			}
		}
		w.WriteHeader(http.StatusCreated)
	}))
	return t
}

// expect arms the target for n more requests.
func (t *target) expect(n int) { t.want.Store(t.n.Load() + int64(n)) }

// wait returns when the armed count arrived, with the last arrival.
func (t *target) wait(within time.Duration) (time.Time, error) {
	select {
	case <-t.done:
	case <-time.After(within):
		return time.Time{}, fmt.Errorf("target got %d of %d requests within %v", t.n.Load(), t.want.Load(), within)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.arrived[len(t.arrived)-1], nil
}

// httpJob is a plain river job doing what a relay does: one HTTP request
// frozen as bytes, sent with an idempotency key.
type httpJob struct {
	Key     string `json:"key"`
	Request []byte `json:"request"`
}

func (httpJob) Kind() string { return "bench_http" }

type httpWorker struct {
	river.WorkerDefaults[httpJob]
	d *effects.HTTP
}

func (w *httpWorker) Work(ctx context.Context, job *river.Job[httpJob]) error {
	_, err := w.d.Deliver(ctx, effects.Delivery{Key: job.Args.Key, Request: job.Args.Request, Attempt: job.Attempt})
	return err
}

func run(e *bench.Env, dbURL string, rounds int, log io.Writer) (err error) {
	ctx := e.Ctx
	pcfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return err
	}
	pcfg.MaxConns = 32
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	schema := "fencebench_effects_" + hex.EncodeToString(rb[:])
	if _, err := migrations.Migrate(ctx, pool, migrations.Options{Schema: schema}, migrations.Lease, migrations.Guard, migrations.Effects); err != nil {
		return err
	}
	defer func() {
		_, derr := pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		err = errors.Join(err, derr)
	}()
	mig, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema})
	if err != nil {
		return err
	}
	if _, err := mig.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrations: %w", err)
	}
	m, err := lease.New(lease.Config{Pool: pool, Schema: schema, TTL: time.Minute})
	if err != nil {
		return err
	}
	defer m.Close() //nolint:errcheck // bench teardown
	key := lease.Key{AccountID: "bench", SessionID: "effects-" + hex.EncodeToString(rb[:])}
	l, err := m.Acquire(ctx, key)
	if err != nil {
		return err
	}
	tg := newTarget()
	defer tg.srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	deliverer := &effects.HTTP{Client: client}
	req, err := effects.HTTPRequest{Method: "POST", URL: tg.srv.URL + "/charge", Body: []byte(`{"amount":1}`)}.Freeze()
	if err != nil {
		return err
	}
	newOutbox := func() (*effects.Outbox, error) {
		return effects.New(effects.Config{Pool: pool, Schema: schema, Targets: []effects.Target{{Name: "pay", Deliverer: deliverer}}})
	}
	o, err := newOutbox()
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "[effects] record: %d rounds\n", rounds)
	if err := recordSide(e, l, o, pool, schema, key, req, rounds); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	samples := 300
	if e.Quick {
		samples = 60
	}
	fmt.Fprintf(log, "[effects] delivery delay: %d effects\n", samples)
	if err := deliverySide(e, l, o, newOutbox, tg, req, samples); err != nil {
		return fmt.Errorf("delivery: %w", err)
	}
	trounds := 5
	if e.Quick {
		trounds = 2
	}
	fmt.Fprintf(log, "[effects] throughput: %d rounds of %d effects per side\n", trounds, batch)
	if err := throughput(e, l, o, newOutbox, pool, schema, tg, deliverer, req, trounds); err != nil {
		return fmt.Errorf("throughput: %w", err)
	}
	_, err = l.Release(ctx)
	return err
}

// recordSide alternates Record with the same row inserted through
// pgguard's InTx. The rows it records are deleted afterwards (no relay
// runs meanwhile), so that the later sides start from an empty outbox.
func recordSide(e *bench.Env, l *lease.Lease, o *effects.Outbox, pool *pgxpool.Pool, schema string, key lease.Key, req []byte, rounds int) error {
	ctx := l.Context()
	g, err := pgguard.New(pgguard.Config{DB: pool, Schema: schema})
	if err != nil {
		return err
	}
	ins := fmt.Sprintf(`INSERT INTO %s (target, account_id, session_id, run_id, fence_token, request_key, request, next_at, created_at, updated_at)
VALUES ('pay', $1, $2, $3::uuid, $4, $5, $6, now(), now(), now())`, pgx.Identifier{schema, "fencekit_effects"}.Sanitize())
	res := key.Resource("effects")
	runID := l.RunID().String()
	var ts [2][]time.Duration
	sides := [2]func(i int) error{
		func(i int) error {
			_, err := o.Record(ctx, effects.Effect{Target: "pay", RequestKey: fmt.Sprintf("rec-%d", i), Request: req})
			return err
		},
		func(i int) error {
			return g.InTx(ctx, res, func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, ins, key.AccountID, key.SessionID, runID, int64(l.Token()), fmt.Sprintf("intx-%d", i), req)
				return err
			})
		},
	}
	const warmup = 30
	for r := range rounds + warmup {
		for _, k := range bench.Order(r, 2) {
			t0 := time.Now()
			if err := sides[k](r); err != nil {
				return err
			}
			if r >= warmup {
				ts[k] = append(ts[k], time.Since(t0))
			}
		}
	}
	if _, err := pool.Exec(context.Background(), "DELETE FROM "+pgx.Identifier{schema, "fencekit_effects"}.Sanitize()); err != nil {
		return err
	}
	n := len(ts[0])
	blocks := min(bench.RatioBlocks, n)
	var per []float64
	for b := range blocks {
		lo, hi := b*n/blocks, (b+1)*n/blocks
		per = append(per, float64(bench.Percentile(ts[0][lo:hi], 50))/float64(bench.Percentile(ts[1][lo:hi], 50)))
	}
	sp := bench.Summarize(per)
	how := fmt.Sprintf("%d rounds of one call per side, order rotated per round; p50 ratio per block of rounds, median of %d blocks (min-max)", n, blocks)
	e.Report.Add(bench.Metric{Key: "effects_record_vs_intx_ratio", Value: sp.Median, Unit: "x", Target: 1.2, Cmp: bench.AtMost, Spread: &sp,
		Note: "Outbox.Record (own transaction, lease-row check, insert) vs the same row through pgguard InTx; " + how})
	e.Report.Add(bench.Metric{Key: "effects_record_p50_us", Value: us(bench.Percentile(ts[0], 50)), Unit: "µs", Note: "Outbox.Record, p50"})
	e.Report.Add(bench.Metric{Key: "effects_intx_p50_us", Value: us(bench.Percentile(ts[1], 50)), Unit: "µs", Note: "pgguard InTx + INSERT, p50"})
	return nil
}

// deliverySide records one effect at a time with a relay running and
// measures from Record's return (its commit) to the target's receipt.
func deliverySide(e *bench.Env, l *lease.Lease, o *effects.Outbox, newOutbox func() (*effects.Outbox, error), tg *target, req []byte, samples int) error {
	ro, err := newOutbox()
	if err != nil {
		return err
	}
	r, err := effects.NewRelay(ro, effects.RelayConfig{Batch: inFlight})
	if err != nil {
		return err
	}
	if err := r.Start(context.Background()); err != nil {
		return err
	}
	defer r.Stop() //nolint:errcheck // bench teardown
	var d []time.Duration
	for i := range samples + 10 {
		tg.expect(1)
		if _, err := o.Record(l.Context(), effects.Effect{Target: "pay", RequestKey: fmt.Sprintf("delay-%d", i), Request: req}); err != nil {
			return err
		}
		committed := time.Now()
		at, err := tg.wait(30 * time.Second)
		if err != nil {
			return err
		}
		if i >= 10 {
			d = append(d, at.Sub(committed))
		}
	}
	note := fmt.Sprintf("from Record's return (commit) to the HTTP target's receipt, a running Relay (LISTEN/NOTIFY), %d effects one at a time", len(d))
	e.Report.Add(bench.Metric{Key: "effects_delivery_p50_ms", Value: ms(bench.Percentile(d, 50)), Unit: "ms", Target: 20, Cmp: bench.AtMost, Note: note + ", p50"})
	e.Report.Add(bench.Metric{Key: "effects_delivery_p99_ms", Value: ms(bench.Percentile(d, 99)), Unit: "ms", Target: 200, Cmp: bench.AtMost, Note: note + ", p99"})
	return r.Stop()
}

// throughput alternates the relay, river and rivereffects sides.
func throughput(e *bench.Env, l *lease.Lease, o *effects.Outbox, newOutbox func() (*effects.Outbox, error), pool *pgxpool.Pool, schema string,
	tg *target, deliverer *effects.HTTP, req []byte, rounds int) error {
	ctx := context.Background()
	workerRelayOutbox, err := newOutbox()
	if err != nil {
		return err
	}
	workerRelay, err := effects.NewRelay(workerRelayOutbox, effects.RelayConfig{})
	if err != nil {
		return err
	}
	ew, err := rivereffects.NewWorker(rivereffects.WorkerConfig{Relay: workerRelay})
	if err != nil {
		return err
	}
	ws := river.NewWorkers()
	river.AddWorker(ws, &httpWorker{d: deliverer})
	river.AddWorker(ws, ew)
	// FetchCooldown lowered from river's 100 ms default, which would cap a
	// queue at one fetch (≤ MaxWorkers jobs) per 100 ms.
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema, Workers: ws, FetchCooldown: time.Millisecond,
		Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: inFlight}}})
	if err != nil {
		return err
	}
	if err := rc.Start(ctx); err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = rc.Stop(sctx)
	}()
	rec, err := rivereffects.New(rivereffects.Config{Outbox: o, Client: rc})
	if err != nil {
		return err
	}
	final := func(table, cond string) error {
		q := fmt.Sprintf(`SELECT count(*) FROM %s WHERE %s`, pgx.Identifier{schema, table}.Sanitize(), cond)
		deadline := time.Now().Add(60 * time.Second)
		for {
			var n int
			if err := pool.QueryRow(ctx, q).Scan(&n); err != nil {
				return err
			}
			if n == 0 {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%d rows of %s not final", n, table)
			}
			time.Sleep(5 * time.Millisecond) // polling a state the bench does not time
		}
	}
	type side struct {
		name   string
		insert func(tx pgx.Tx, round, i int) error
		start  func() (stop func() error, err error)
		settle func() error
	}
	none := func() (func() error, error) { return func() error { return nil }, nil }
	sides := []side{
		{"relay", func(tx pgx.Tx, round, i int) error {
			_, err := o.RecordTx(l.Context(), tx, effects.Effect{Target: "pay", RequestKey: fmt.Sprintf("relay-%d-%d", round, i), Request: req})
			return err
		}, func() (func() error, error) {
			ro, err := newOutbox()
			if err != nil {
				return nil, err
			}
			r, err := effects.NewRelay(ro, effects.RelayConfig{Batch: inFlight})
			if err != nil {
				return nil, err
			}
			if err := r.Start(ctx); err != nil {
				return nil, err
			}
			// Untimed: the relay's LISTEN connects in the background; a
			// commit before it would wait for the poll instead.
			time.Sleep(200 * time.Millisecond)
			return r.Stop, nil
		}, func() error { return final("fencekit_effects", "final_at IS NULL") }},
		{"river", func(tx pgx.Tx, round, i int) error {
			_, err := rc.InsertTx(ctx, tx, httpJob{Key: fmt.Sprintf("river-%d-%d", round, i), Request: req}, nil)
			return err
		}, none, func() error { return final("river_job", "finalized_at IS NULL") }},
		{"rivereffects", func(tx pgx.Tx, round, i int) error {
			_, err := rec.RecordTx(l.Context(), tx, effects.Effect{Target: "pay", RequestKey: fmt.Sprintf("rivereffects-%d-%d", round, i), Request: req})
			return err
		}, none, func() error {
			if err := final("fencekit_effects", "final_at IS NULL"); err != nil {
				return err
			}
			return final("river_job", "finalized_at IS NULL")
		}},
	}
	rates := make([][]float64, len(sides))
	for r := range rounds + 1 { // round 0 warms every side up
		for _, k := range bench.Order(r, len(sides)) {
			s := sides[k]
			stop, err := s.start()
			if err != nil {
				return err
			}
			tg.expect(batch)
			tx, err := pool.Begin(ctx)
			if err != nil {
				return err
			}
			for i := range batch {
				if err := s.insert(tx, r, i); err != nil {
					_ = tx.Rollback(ctx)
					return fmt.Errorf("%s: %w", s.name, err)
				}
			}
			if err := tx.Commit(ctx); err != nil {
				return err
			}
			committed := time.Now()
			last, err := tg.wait(60 * time.Second)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			if err := s.settle(); err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			if err := stop(); err != nil {
				return err
			}
			if r > 0 {
				rates[k] = append(rates[k], batch/last.Sub(committed).Seconds())
			}
		}
	}
	how := fmt.Sprintf("%d effects recorded in one transaction, from its commit to the target's last receipt, %d in flight; %d rounds, sides alternating, median (min-max) over rounds", batch, inFlight, rounds)
	spreads := make([]bench.Spread, len(sides))
	for k, s := range sides {
		spreads[k] = bench.Summarize(rates[k])
		m := bench.Metric{Key: "effects_" + s.name + "_delivered_per_s", Value: spreads[k].Median, Unit: "1/s", Spread: &spreads[k], Note: s.name + "; " + how}
		if s.name == "relay" {
			m.Target, m.Cmp = 2000, bench.AtLeast
		}
		e.Report.Add(m)
	}
	per := make([]float64, min(len(rates[0]), len(rates[1])))
	for i := range per {
		per[i] = rates[0][i] / rates[1][i]
	}
	sp := bench.Summarize(per)
	e.Report.Add(bench.Metric{Key: "effects_relay_vs_river_ratio", Value: sp.Median, Unit: "x", Spread: &sp,
		Note: "relay delivered/s over river's InsertTx + workers doing the same delivery (no lease check, no claim epoch), per round"})
	return nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
