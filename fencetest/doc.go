// Package fencetest is a test kit for programs that use fencekit: a private,
// migrated PostgreSQL schema and a fresh MinIO bucket per test, removed at
// cleanup, and a database network the test controls, to make a Manager lose
// its lease and exercise the program's takeover paths.
//
//	func TestToolCallStopsWhenTheLeaseIsLost(t *testing.T) {
//		schema := fencetest.Schema(t, migrations.Lease, migrations.Guard)
//		pool, net := fencetest.FaultyPool(t)
//		m, _ := lease.New(lease.Config{Pool: pool, Schema: schema, TTL: time.Second})
//		defer m.Close()
//		l, _ := m.Acquire(ctx, key)
//		cause := net.LoseLease(t, l) // lease.ErrTrustExpired
//		// ... assert the program stopped, and that a guard refuses l's token
//	}
//
// A takeover needs no fault: a second Manager's Takeover cancels the first
// holder's context with lease.ErrTakenOver.
//
// Services come from the environment: TEST_DATABASE_URL (default
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable),
// TEST_MINIO_ENDPOINT, TEST_MINIO_ACCESS_KEY and TEST_MINIO_SECRET_KEY. A
// missing service fails the test when CI=true (or 1) and skips it otherwise.
// With go test -short every helper that needs a service skips the test
// before connecting (SkipShort), so -short runs need no service at all.
//
// Guaranteed: every schema, bucket, pool and proxy a test gets is its own and
// is removed or closed when the test ends, in reverse order of creation
// (t.Cleanup). Not guaranteed: isolation from other programs using the same
// server, and faults beyond what a TCP proxy on the loopback interface can
// produce (it cannot crash the server or skew its clock).
package fencetest
