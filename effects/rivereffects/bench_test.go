package rivereffects_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/effects"
	"github.com/fencekit/fencekit/effects/rivereffects"
	"github.com/fencekit/fencekit/fencetest"
)

// benchBatch is how many effects each benchmark iteration records and
// delivers.
const benchBatch = 200

// benchConcurrency is the delivery concurrency on both sides: the relay's
// Batch (its claimed effects are delivered concurrently) and river's
// MaxWorkers.
const benchConcurrency = 16

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

// counter is the benchmark's HTTP target: it counts requests and signals
// when the count reaches want.
type counter struct {
	srv  *httptest.Server
	n    atomic.Int64
	want atomic.Int64
	done chan struct{}
}

func newCounter(b *testing.B) *counter {
	c := &counter{done: make(chan struct{}, 1)}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if c.n.Add(1) == c.want.Load() {
			c.done <- struct{}{}
		}
		w.WriteHeader(http.StatusCreated)
	}))
	b.Cleanup(c.srv.Close)
	return c
}

// BenchmarkDeliveryVsRiver records benchBatch effects per iteration in one
// transaction and measures the time until the target received all of them,
// three ways on one schema, one after the other in the same run:
//
//   - relay: effects.Outbox.RecordTx (the lease-row check and the insert,
//     per effect) and a running effects.Relay (woken by NOTIFY);
//   - river: river's InsertTx of a job carrying the frozen request, and
//     river workers sending it with the same HTTP deliverer (no lease
//     check, no claim epoch: river's own job protocol);
//   - rivereffects: this package's Recorder (RecordTx + InsertTx of the
//     effect id) and Worker (Relay.DeliverEffect).
//
// Each side delivers with benchConcurrency in flight, through one HTTP
// client. Between iterations (timer stopped) it waits until every
// effect or job of the iteration is final in the database.
//
//	cd effects/rivereffects && go test -run '^$' -bench BenchmarkDeliveryVsRiver -benchtime 5x -count 5 .
func BenchmarkDeliveryVsRiver(b *testing.B) {
	e := newEnv(b)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	deliverer := &effects.HTTP{Client: client}
	l, err := e.manager().Acquire(bg(), key())
	require.NoError(b, err)
	newOutbox := func() *effects.Outbox {
		o, err := effects.New(effects.Config{Pool: fencetest.Pool(b), Schema: e.schema,
			Targets: []effects.Target{{Name: "pay", Deliverer: deliverer}}})
		require.NoError(b, err)
		return o
	}
	riverConfig := func(ws *river.Workers) *river.Config {
		// FetchCooldown lowered from river's 100 ms default, which would
		// cap a queue at one fetch (≤ MaxWorkers jobs) per 100 ms.
		return &river.Config{Schema: e.schema, Workers: ws, FetchCooldown: time.Millisecond, TestOnly: true,
			Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: benchConcurrency}}}
	}
	startRiver := func(b *testing.B, ws *river.Workers) *river.Client[pgx.Tx] {
		c, err := river.NewClient(riverpgxv5.New(fencetest.Pool(b)), riverConfig(ws))
		require.NoError(b, err)
		require.NoError(b, c.Start(bg()))
		b.Cleanup(func() {
			ctx, cancel := context.WithTimeout(bg(), 10*time.Second)
			defer cancel()
			_ = c.Stop(ctx)
		})
		return c
	}
	// run times one iteration: insert (in one transaction) then wait for
	// the target; settle waits, untimed, until the database shows the
	// iteration final.
	tg := newCounter(b)
	req, err := effects.HTTPRequest{Method: "POST", URL: tg.srv.URL + "/charge", Body: []byte(`{"amount":1}`)}.Freeze()
	require.NoError(b, err)
	run := func(b *testing.B, insert func(tx pgx.Tx, prefix string, i int) error, settle func()) {
		var busy, delivering time.Duration
		for b.Loop() {
			prefix := uuid.NewString()[:8]
			tg.want.Store(tg.n.Load() + benchBatch)
			t0 := time.Now()
			tx, err := e.pool.Begin(bg())
			require.NoError(b, err)
			for i := range benchBatch {
				if err := insert(tx, prefix, i); err != nil {
					b.Fatal(err)
				}
			}
			require.NoError(b, tx.Commit(bg()))
			t1 := time.Now()
			select {
			case <-tg.done:
			case <-time.After(60 * time.Second):
				b.Fatalf("target got %d of %d", tg.n.Load(), tg.want.Load())
			}
			busy += time.Since(t0)
			delivering += time.Since(t1)
			b.StopTimer()
			settle()
			b.StartTimer()
		}
		// effects/s: record and deliver; delivered/s: from the commit to
		// the last request at the target.
		b.ReportMetric(float64(b.N*benchBatch)/busy.Seconds(), "effects/s")
		b.ReportMetric(float64(b.N*benchBatch)/delivering.Seconds(), "delivered/s")
	}
	finalWait := func(table, cond string) func() {
		return func() {
			q := fmt.Sprintf(`SELECT count(*) FROM %q.%s WHERE %s`, e.schema, table, cond)
			deadline := time.Now().Add(30 * time.Second)
			for {
				var n int
				require.NoError(b, e.pool.QueryRow(bg(), q).Scan(&n))
				if n == 0 {
					return
				}
				if time.Now().After(deadline) {
					b.Fatalf("%d rows of %s not final", n, table)
				}
				time.Sleep(5 * time.Millisecond) // polling a state
			}
		}
	}
	effectsFinal := finalWait("fencekit_effects", "final_at IS NULL")
	jobsFinal := finalWait("river_job", "finalized_at IS NULL")

	b.Run("relay", func(b *testing.B) {
		o := newOutbox()
		r, err := effects.NewRelay(newOutbox(), effects.RelayConfig{Batch: benchConcurrency})
		require.NoError(b, err)
		require.NoError(b, r.Start(bg()))
		defer func() { require.NoError(b, r.Stop()) }()
		run(b, func(tx pgx.Tx, prefix string, i int) error {
			_, err := o.RecordTx(l.Context(), tx, effects.Effect{Target: "pay", RequestKey: fmt.Sprintf("r-%s-%d", prefix, i), Request: req})
			return err
		}, effectsFinal)
	})
	b.Run("river", func(b *testing.B) {
		ws := river.NewWorkers()
		river.AddWorker(ws, &httpWorker{d: deliverer})
		c := startRiver(b, ws)
		run(b, func(tx pgx.Tx, prefix string, i int) error {
			_, err := c.InsertTx(bg(), tx, httpJob{Key: fmt.Sprintf("k-%s-%d", prefix, i), Request: req}, nil)
			return err
		}, jobsFinal)
	})
	b.Run("rivereffects", func(b *testing.B) {
		o := newOutbox()
		relay, err := effects.NewRelay(newOutbox(), effects.RelayConfig{})
		require.NoError(b, err)
		w, err := rivereffects.NewWorker(rivereffects.WorkerConfig{Relay: relay})
		require.NoError(b, err)
		ws := river.NewWorkers()
		river.AddWorker(ws, w)
		c := startRiver(b, ws)
		rec, err := rivereffects.New(rivereffects.Config{Outbox: o, Client: c})
		require.NoError(b, err)
		run(b, func(tx pgx.Tx, prefix string, i int) error {
			_, err := rec.RecordTx(l.Context(), tx, effects.Effect{Target: "pay", RequestKey: fmt.Sprintf("w-%s-%d", prefix, i), Request: req})
			return err
		}, func() { effectsFinal(); jobsFinal() })
	})
}
