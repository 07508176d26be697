package rivereffects_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fencekit/fencekit/effects"
	"github.com/fencekit/fencekit/effects/rivereffects"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func bg() context.Context { return context.Background() }

// env is a private schema holding the lease and effects sets and river's
// tables (rivermigrate), never the shared database's public schema.
type env struct {
	t      testing.TB
	schema string
	pool   *pgxpool.Pool
}

func newEnv(t testing.TB) *env {
	t.Helper()
	schema := fencetest.Schema(t, migrations.Lease, migrations.Effects)
	pool := fencetest.Pool(t)
	mig, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema})
	require.NoError(t, err)
	_, err = mig.Migrate(bg(), rivermigrate.DirectionUp, nil)
	require.NoError(t, err)
	return &env{t: t, schema: schema, pool: pool}
}

func (e *env) manager() *lease.Manager {
	e.t.Helper()
	m, err := lease.New(lease.Config{Pool: fencetest.Pool(e.t), Schema: e.schema, TTL: 30 * time.Second})
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = m.Close() })
	return m
}

func (e *env) outbox() *effects.Outbox {
	e.t.Helper()
	o, err := effects.New(effects.Config{Pool: fencetest.Pool(e.t), Schema: e.schema, AwaitPoll: 10 * time.Millisecond,
		Targets: []effects.Target{{Name: "pay", Deliverer: &effects.HTTP{}}}})
	require.NoError(e.t, err)
	return o
}

// client is a river client on the schema; with a worker it works the
// default queue, without it inserts only. Stopped at cleanup.
func (e *env) client(w *rivereffects.Worker, workers int) *river.Client[pgx.Tx] {
	e.t.Helper()
	cfg := &river.Config{Schema: e.schema, FetchPollInterval: 20 * time.Millisecond, FetchCooldown: time.Millisecond, TestOnly: true}
	if w != nil {
		ws := river.NewWorkers()
		river.AddWorker(ws, w)
		cfg.Workers = ws
		cfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}}
	}
	c, err := river.NewClient(riverpgxv5.New(fencetest.Pool(e.t)), cfg)
	require.NoError(e.t, err)
	if w != nil {
		require.NoError(e.t, c.Start(bg()))
		e.t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(bg(), 10*time.Second)
			defer cancel()
			require.NoError(e.t, c.Stop(ctx))
		})
	}
	return c
}

// worker is a Worker over its own never-started Relay.
func (e *env) worker(o *effects.Outbox, name string) (*rivereffects.Worker, *effects.Relay) {
	e.t.Helper()
	r, err := effects.NewRelay(o, effects.RelayConfig{Name: name, RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond})
	require.NoError(e.t, err)
	w, err := rivereffects.NewWorker(rivereffects.WorkerConfig{Relay: r, MinSnooze: 20 * time.Millisecond})
	require.NoError(e.t, err)
	return w, r
}

// jobs counts river jobs of the schema by state.
func (e *env) jobs() map[string]int {
	e.t.Helper()
	rows, err := e.pool.Query(bg(), fmt.Sprintf(`SELECT state::text, count(*) FROM %q.river_job GROUP BY 1`, e.schema))
	require.NoError(e.t, err)
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		require.NoError(e.t, rows.Scan(&s, &n))
		out[s] = n
	}
	require.NoError(e.t, rows.Err())
	return out
}

func (e *env) effectsCount() int {
	e.t.Helper()
	var n int
	require.NoError(e.t, e.pool.QueryRow(bg(), fmt.Sprintf(`SELECT count(*) FROM %q.fencekit_effects`, e.schema)).Scan(&n))
	return n
}

func key() lease.Key {
	return lease.Key{AccountID: "acct-" + fencetest.RandomName(""), SessionID: "conv"}
}

// target counts requests per Idempotency-Key; the next fail requests get
// 503.
type target struct {
	srv  *httptest.Server
	mu   sync.Mutex
	keys map[string]int
	fail int
}

func newTarget(t testing.TB) *target {
	tg := &target{keys: map[string]int{}}
	tg.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		tg.mu.Lock()
		tg.keys[r.Header.Get("Idempotency-Key")]++
		fail := tg.fail > 0
		if fail {
			tg.fail--
		}
		tg.mu.Unlock()
		if fail {
			http.Error(w, "later", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(tg.srv.Close)
	return tg
}

func (tg *target) count(key string) int {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return tg.keys[key]
}

func (tg *target) effect(t testing.TB, requestKey string) effects.Effect {
	t.Helper()
	b, err := effects.HTTPRequest{Method: "POST", URL: tg.srv.URL + "/charge", Body: []byte(`{"amount":1}`)}.Freeze()
	require.NoError(t, err)
	return effects.Effect{Target: "pay", RequestKey: requestKey, Request: b}
}

func eventually(t testing.TB, d time.Duration, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out: " + msg)
		}
		time.Sleep(10 * time.Millisecond) // polling a state
	}
}

func context10s() (context.Context, context.CancelFunc) {
	return context.WithTimeout(bg(), 10*time.Second)
}
