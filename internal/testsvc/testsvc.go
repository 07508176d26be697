// Package testsvc connects fencekit's tests to the real services they need:
// PostgreSQL through TEST_DATABASE_URL and MinIO through TEST_MINIO_ENDPOINT,
// TEST_MINIO_ACCESS_KEY and TEST_MINIO_SECRET_KEY.
//
// When a service is missing, a test fails under CI (CI=true) and is skipped
// otherwise, with a message naming the variable and `make services`. The
// helpers users get too (Missing, DatabaseURL, Schema, MinIO) are those of
// the public kit fencetest; this package adds what only fencekit's own tests
// need.
package testsvc

import (
	"crypto/rand"
	"encoding/hex"
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/minio/minio-go/v7"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/sql/migrations"
)

// DefaultDatabaseURL is used when TEST_DATABASE_URL is unset.
const DefaultDatabaseURL = fencetest.DefaultDatabaseURL

// InCI reports whether CI=true (or 1) is set.
func InCI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v == "true" || v == "1"
}

// Missing fails the test under CI and skips it otherwise (fencetest.Missing).
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	fencetest.Missing(t, format, args...)
}

// SkipShort skips the test in -short mode (fencetest.SkipShort): for tests
// that reach a service without the helpers below.
func SkipShort(t testing.TB) {
	t.Helper()
	fencetest.SkipShort(t)
}

// SkipServiceExamples makes m.Run skip the package's Example functions in
// -short mode; call it first in TestMain of a package whose examples need a
// service (an Example cannot skip itself). It parses the test flags.
func SkipServiceExamples() {
	flag.Parse()
	if !testing.Short() {
		return
	}
	skip := "^Example"
	if cur := flag.Lookup("test.skip").Value.String(); cur != "" {
		skip = cur + "|" + skip
	}
	_ = flag.Set("test.skip", skip)
}

// DatabaseURL returns TEST_DATABASE_URL or DefaultDatabaseURL.
func DatabaseURL() string { return fencetest.DatabaseURL() }

// Pool opens a new, independent pool to the test database and closes it when
// the test ends. Each call returns a separate pool with its own connections.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return PoolWith(t, DatabaseURL(), nil)
}

// PoolWith opens a pool to url, letting configure adjust the config first.
func PoolWith(t testing.TB, url string, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("bad database url: %v", err)
	}
	if configure != nil {
		configure(cfg)
	}
	return fencetest.PoolFor(t, cfg)
}

// RandomName returns prefix followed by 12 random hex characters, usable as
// an identifier.
func RandomName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Schema creates a private schema, applies the given migration sets (both
// when none are given) and drops it when the test ends (fencetest.Schema).
func Schema(t testing.TB, sets ...migrations.Set) string {
	t.Helper()
	return fencetest.Schema(t, sets...)
}

// MinIOConfig is the connection info from the TEST_MINIO_* variables.
type MinIOConfig struct {
	Endpoint, AccessKey, SecretKey string
}

// MinIOEnv reads TEST_MINIO_ENDPOINT, TEST_MINIO_ACCESS_KEY and
// TEST_MINIO_SECRET_KEY; ok is false when the endpoint is unset.
func MinIOEnv() (MinIOConfig, bool) {
	c := MinIOConfig{
		Endpoint:  os.Getenv("TEST_MINIO_ENDPOINT"),
		AccessKey: os.Getenv("TEST_MINIO_ACCESS_KEY"),
		SecretKey: os.Getenv("TEST_MINIO_SECRET_KEY"),
	}
	return c, c.Endpoint != ""
}

// MinIO returns a client for the test MinIO and a fresh bucket that is
// emptied and removed when the test ends (fencetest.Bucket).
func MinIO(t testing.TB) (*minio.Client, string) {
	t.Helper()
	return fencetest.Bucket(t)
}
