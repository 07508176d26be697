package fencetest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// The MinIO client keeps idle HTTP connections of its own.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

func bg() context.Context { return context.Background() }

// TestSchemaIsPrivateAndDropped: the schema exists with the lease tables
// while the test runs and is gone after its cleanup.
func TestSchemaIsPrivateAndDropped(t *testing.T) {
	raw := fencetest.Pool(t)
	var schema string
	t.Run("inner", func(t *testing.T) {
		schema = fencetest.Schema(t, migrations.Lease)
		var n int
		require.NoError(t, raw.QueryRow(bg(), `SELECT count(*) FROM information_schema.tables WHERE table_schema = $1 AND table_name = 'fencekit_leases'`, schema).Scan(&n))
		require.Equal(t, 1, n)
		require.NotEqual(t, schema, fencetest.Schema(t, migrations.Lease), "every call gets its own schema")
	})
	var n int
	require.NoError(t, raw.QueryRow(bg(), `SELECT count(*) FROM information_schema.schemata WHERE schema_name = $1`, schema).Scan(&n))
	require.Zero(t, n, "schema %s dropped at cleanup", schema)
}

// TestBucketIsFreshAndRemoved: the bucket is empty, writable, and removed
// (with its objects) after the test.
func TestBucketIsFreshAndRemoved(t *testing.T) {
	var client *minio.Client
	var bucket string
	t.Run("inner", func(t *testing.T) {
		client, bucket = fencetest.Bucket(t)
		for obj := range client.ListObjects(bg(), bucket, minio.ListObjectsOptions{Recursive: true}) {
			t.Fatalf("fresh bucket holds %q", obj.Key)
		}
		_, err := client.PutObject(bg(), bucket, "k", bytes.NewReader([]byte("v")), 1, minio.PutObjectOptions{})
		require.NoError(t, err)
	})
	if client == nil {
		t.Skip("no bucket was created (MinIO missing)")
	}
	ok, err := client.BucketExists(bg(), bucket)
	require.NoError(t, err)
	require.False(t, ok, "bucket %s removed at cleanup", bucket)
}

// TestLoseLease: a Manager on a FaultyPool loses its lease when the network
// is cut (ErrTrustExpired); another Manager then gets the key with a larger
// token, and the first one's renewal is refused once the network is back.
func TestLoseLease(t *testing.T) {
	schema := fencetest.Schema(t, migrations.Lease)
	pool, fault := fencetest.FaultyPool(t)
	m, err := lease.New(lease.Config{Pool: pool, Schema: schema, TTL: time.Second, CallTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	defer m.Close()
	other, err := lease.New(lease.Config{Pool: fencetest.Pool(t), Schema: schema})
	require.NoError(t, err)
	defer other.Close()

	k := lease.Key{AccountID: "acct", SessionID: fmt.Sprint(time.Now().UnixNano())}
	l, err := m.Acquire(bg(), k)
	require.NoError(t, err)
	require.ErrorIs(t, fault.LoseLease(t, l), lease.ErrTrustExpired)

	ctx, cancel := context.WithTimeout(bg(), 30*time.Second)
	defer cancel()
	l2, err := other.AcquireWait(ctx, k)
	require.NoError(t, err)
	require.Greater(t, l2.Token(), l.Token())
	// The renewal's statement bound is 200 ms: on a loaded machine the first
	// statements after the cut (new connections) may run over it. Retry
	// those; the answer that reaches the database must be a refusal.
	deadline := time.Now().Add(10 * time.Second)
	_, err = m.Renew(bg(), k, l.RunID())
	for errors.Is(err, context.DeadlineExceeded) && time.Now().Before(deadline) {
		_, err = m.Renew(bg(), k, l.RunID())
	}
	require.ErrorIs(t, err, lease.ErrLost)
}

// TestPartitionHangsUntilRestore: under Partition a statement neither
// succeeds nor fails until its own deadline; after Restore it succeeds.
func TestPartitionHangsUntilRestore(t *testing.T) {
	pool, fault := fencetest.FaultyPool(t)
	require.NoError(t, pool.Ping(bg()))
	fault.Partition()
	ctx, cancel := context.WithTimeout(bg(), 300*time.Millisecond)
	defer cancel()
	_, err := pool.Exec(ctx, "SELECT 1")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	fault.Restore()
	ctx2, cancel2 := context.WithTimeout(bg(), 10*time.Second)
	defer cancel2()
	require.NoError(t, pool.Ping(ctx2))
}
