package effects_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/effects"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// A tool holding a conversation's lease records a payment call; a relay
// delivers it once, with an Idempotency-Key derived from the effect id.
func Example() {
	ctx := context.Background()
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/test"
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if _, err := migrations.Migrate(ctx, pool, migrations.Options{Schema: "app"}, migrations.Lease, migrations.Effects); err != nil {
		log.Fatal(err)
	}

	// The payment API: it sees the key on every call.
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	defer api.Close()

	m, err := lease.New(lease.Config{Pool: pool, Schema: "app"})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	out, err := effects.New(effects.Config{Pool: pool, Schema: "app",
		Targets: []effects.Target{{Name: "payments", Deliverer: &effects.HTTP{}}}})
	if err != nil {
		log.Fatal(err)
	}
	relay, err := effects.NewRelay(out, effects.RelayConfig{})
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer relay.Stop()

	key := lease.Key{AccountID: "acct-example", SessionID: fmt.Sprint("conv-", time.Now().UnixNano())}
	l, err := m.Acquire(ctx, key)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(context.Background())

	req, err := effects.HTTPRequest{Method: "POST", URL: api.URL + "/charges", Body: []byte(`{"amount":1250}`)}.Freeze()
	if err != nil {
		log.Fatal(err)
	}
	// Recorded only while l is the key's current grant.
	id, err := out.Record(l.Context(), effects.Effect{Target: "payments", RequestKey: "charge-order-42", Request: req})
	if err != nil {
		log.Fatal(err)
	}
	res, err := out.Await(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.State, res.Code)
	// Output: delivered 201
}
