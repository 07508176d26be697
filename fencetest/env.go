package fencetest

import (
	"crypto/rand"
	"encoding/hex"
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// InCI reports whether the CI environment variable is "true" or "1": then a
// missing service fails a test (Missing) instead of skipping it.
func InCI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v == "true" || v == "1"
}

// PoolWith opens a new, independent pool to url, after configure (may be
// nil) adjusted its configuration; closed when the test ends. An unreachable
// database is reported with Missing. In -short mode the test is skipped.
func PoolWith(t testing.TB, url string, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("fencetest: bad database url: %v", err)
	}
	if configure != nil {
		configure(cfg)
	}
	return PoolFor(t, cfg)
}

// RandomName returns prefix followed by 12 random hex characters: a name
// for a private schema, table, bucket or key that no other test uses.
func RandomName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// MinIOConfig is the test MinIO's address and credentials, read from
// TEST_MINIO_ENDPOINT (host:port), TEST_MINIO_ACCESS_KEY and
// TEST_MINIO_SECRET_KEY.
type MinIOConfig struct {
	Endpoint, AccessKey, SecretKey string
}

// MinIOEnv returns the test MinIO's configuration and whether
// TEST_MINIO_ENDPOINT is set. It does not check that MinIO is reachable
// (Bucket does).
func MinIOEnv() (MinIOConfig, bool) {
	c := MinIOConfig{
		Endpoint:  os.Getenv("TEST_MINIO_ENDPOINT"),
		AccessKey: os.Getenv("TEST_MINIO_ACCESS_KEY"),
		SecretKey: os.Getenv("TEST_MINIO_SECRET_KEY"),
	}
	return c, c.Endpoint != ""
}

// SkipExamplesInShort is for a TestMain whose package has Example functions
// that need a service: in -short mode it adds "^Example" to -test.skip, so
// `go test -short` runs without any service. It parses the test flags, so
// call it at the start of TestMain, before m.Run.
func SkipExamplesInShort() {
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
