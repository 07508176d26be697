package leaseops_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http/httptest"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/leaseops"
	"github.com/fencekit/fencekit/sql/migrations"
)

// opsManager connects and migrates the lease schema "app".
func opsManager(ctx context.Context) (*lease.Manager, *pgxpool.Pool) {
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/test"
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := migrations.Migrate(ctx, pool, migrations.Options{Schema: "app"}, migrations.Lease); err != nil {
		log.Fatal(err)
	}
	m, err := lease.New(lease.Config{Pool: pool, Schema: "app"})
	if err != nil {
		log.Fatal(err)
	}
	return m, pool
}

// StatusHandler serves the leases this process holds, for an operator port.
func ExampleStatusHandler() {
	ctx := context.Background()
	m, pool := opsManager(ctx)
	defer pool.Close()
	defer m.Close()

	l, err := m.Acquire(ctx, lease.Key{AccountID: "acct-1", SessionID: uuid.NewString()}, lease.WithHolder("desktop"))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _, _ = l.Release(context.WithoutCancel(ctx)) }()

	rec := httptest.NewRecorder()
	leaseops.StatusHandler(m).ServeHTTP(rec, httptest.NewRequest("GET", "/leases", nil))
	var rep leaseops.StatusReport
	if err := json.NewDecoder(rec.Body).Decode(&rep); err != nil {
		log.Fatal(err)
	}
	fmt.Println(rec.Code, rec.Header().Get("Content-Type"))
	fmt.Println(len(rep.Leases), "lease held by", rep.Leases[0].Holder, "with token", rep.Leases[0].Token == int64(l.Token()))
	// Output:
	// 200 application/json
	// 1 lease held by desktop with token true
}

// HealthHandler answers readiness probes: 200 while the Manager can grant
// and keep leases, 503 with the problems otherwise.
func ExampleHealthHandler() {
	ctx := context.Background()
	m, pool := opsManager(ctx)
	defer pool.Close()
	defer m.Close()

	rec := httptest.NewRecorder()
	leaseops.HealthHandler(m, 2*time.Second).ServeHTTP(rec, httptest.NewRequest("GET", "/ready", nil))
	var rep leaseops.HealthReport
	if err := json.NewDecoder(rec.Body).Decode(&rep); err != nil {
		log.Fatal(err)
	}
	fmt.Println(rec.Code, rep.Ready, rep.SchemaMigrated, rep.Listener)
	// Output:
	// 200 true true idle
}

// Router sends every key of an account to the same partition's Manager.
func ExampleRouter() {
	ctx := context.Background()
	m0, pool0 := opsManager(ctx)
	defer pool0.Close()
	defer m0.Close()
	m1, pool1 := opsManager(ctx) // a second database in production; the same one here
	defer pool1.Close()
	defer m1.Close()

	r, err := leaseops.NewRouter(leaseops.RouterConfig{Partitions: []*lease.Manager{m0, m1}})
	if err != nil {
		log.Fatal(err)
	}
	a, _ := r.For(lease.Key{AccountID: "acct-7", SessionID: "conversation-1"})
	b, _ := r.For(lease.Key{AccountID: "acct-7", SessionID: "conversation-2"})
	fmt.Println("same partition for one account:", a == b)
	_, err = leaseops.NewRouter(leaseops.RouterConfig{})
	fmt.Println(err)
	// Output:
	// same partition for one account: true
	// leaseops: invalid config Partitions: empty
}
