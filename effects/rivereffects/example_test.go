package rivereffects_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/fencekit/fencekit/effects"
	"github.com/fencekit/fencekit/effects/rivereffects"
	"github.com/fencekit/fencekit/lease"
)

// The wiring: a Recorder that inserts each effect's job in the recording
// transaction, and the Worker registered with the river client that works
// the queue. (Compiled, not run: it needs a database.)
func ExampleRecorder() {
	var (
		pool        *pgxpool.Pool
		out         *effects.Outbox
		riverClient *river.Client[pgx.Tx]
		workers     = river.NewWorkers() // passed in the river client's Config.Workers
		l           *lease.Lease
		req         []byte
	)
	if pool == nil {
		return
	}
	rec, err := rivereffects.New(rivereffects.Config{Outbox: out, Client: riverClient, Pool: pool})
	if err != nil {
		log.Fatal(err)
	}
	tx, err := pool.Begin(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	id, err := rec.RecordTx(l.Context(), tx, effects.Effect{Target: "payments", RequestKey: "charge-42", Request: req})
	if err != nil {
		log.Fatal(err) // stale claim: tx was rolled back, no effect and no job
	}
	if err := tx.Commit(context.Background()); err != nil {
		log.Fatal(err)
	}
	fmt.Println("recorded", id)

	relay, err := effects.NewRelay(out, effects.RelayConfig{}) // its targets, ClaimFor and backoff; not started
	if err != nil {
		log.Fatal(err)
	}
	w, err := rivereffects.NewWorker(rivereffects.WorkerConfig{Relay: relay})
	if err != nil {
		log.Fatal(err)
	}
	river.AddWorker(workers, w)
}
