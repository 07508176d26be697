package fencetest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/fencekit/fencekit/sql/migrations"
)

// DefaultDatabaseURL is used when TEST_DATABASE_URL is unset.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// DatabaseURL returns TEST_DATABASE_URL or DefaultDatabaseURL.
func DatabaseURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultDatabaseURL
}

// Missing reports a missing service: the test fails when CI is "true" or
// "1" and is skipped otherwise.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...) + " (start the services and export TEST_DATABASE_URL / TEST_MINIO_*)"
	if v := strings.ToLower(os.Getenv("CI")); v == "true" || v == "1" {
		t.Fatalf("required service missing under CI: %s", msg)
	}
	t.Skip(msg)
}

// Pool opens a new, independent pool to the test database, closed when the
// test ends. Each call returns a separate pool with its own connections.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(DatabaseURL())
	if err != nil {
		t.Fatalf("fencetest: bad TEST_DATABASE_URL: %v", err)
	}
	return PoolFor(t, cfg)
}

// SkipShort skips the test in -short mode (go test -short), which runs only
// the tests that need no service. Every helper of this package that needs
// PostgreSQL or MinIO calls it first; a test that reaches a service another
// way calls it itself.
func SkipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("fencetest: needs a service (PostgreSQL or MinIO): skipped in -short mode")
	}
}

// PoolFor opens a pool from cfg (for example Pool's configuration with
// another role, database or pool size), pings it, and closes it when the test
// ends. An unreachable server fails the test under CI and skips it otherwise,
// as Missing does. In -short mode the test is skipped without connecting.
func PoolFor(t testing.TB, cfg *pgxpool.Config) *pgxpool.Pool {
	t.Helper()
	SkipShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		Missing(t, "PostgreSQL at TEST_DATABASE_URL unreachable: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Schema creates a private schema, applies the given migration sets (all of
// them when none are given) and drops it, with everything in it, when the
// test ends. It returns the schema's name, for lease.Config.Schema and the
// guards' configs.
func Schema(t testing.TB, sets ...migrations.Set) string {
	t.Helper()
	pool := Pool(t)
	name := RandomName("fk_test_")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := migrations.Migrate(ctx, pool, migrations.Options{Schema: name}, sets...); err != nil {
		t.Fatalf("fencetest: migrate schema %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := migrations.DropSchema(ctx, pool, name); err != nil {
			t.Errorf("fencetest: drop schema %s: %v", name, err)
		}
	})
	return name
}

// Bucket returns a client of the test MinIO and a fresh bucket, emptied (all
// object versions) and removed when the test ends. In -short mode the test
// is skipped.
func Bucket(t testing.TB) (*minio.Client, string) {
	t.Helper()
	SkipShort(t)
	endpoint := os.Getenv("TEST_MINIO_ENDPOINT")
	if endpoint == "" {
		Missing(t, "TEST_MINIO_ENDPOINT is not set")
	}
	client, err := minio.New(endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(os.Getenv("TEST_MINIO_ACCESS_KEY"), os.Getenv("TEST_MINIO_SECRET_KEY"), ""),
		Secure: false,
	})
	if err != nil {
		t.Fatalf("fencetest: minio client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bucket := strings.ReplaceAll(RandomName("fk-test-"), "_", "-")
	if err := client.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		Missing(t, "MinIO at %s unusable: %v", endpoint, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for obj := range client.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true, WithVersions: true}) {
			if obj.Err != nil {
				continue
			}
			_ = client.RemoveObject(ctx, bucket, obj.Key, minio.RemoveObjectOptions{VersionID: obj.VersionID})
		}
		if err := client.RemoveBucket(ctx, bucket); err != nil {
			t.Logf("fencetest: remove bucket %s: %v", bucket, err)
		}
	})
	return client, bucket
}
