package demo

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/fencekit/fencekit/sql/migrations"
)

// Defaults reaching the local services that scripts/services.sh starts.
const (
	DefaultDatabaseURL    = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	DefaultMinIOEndpoint  = "127.0.0.1:9900"
	DefaultMinIOAccessKey = "fencekit"
	DefaultMinIOSecretKey = "fencekit-secret"
	// DefaultSchema holds the demo's leases, marks and reports table.
	DefaultSchema = "fencekit_demo"
	// DefaultBucket holds the demo's report objects; created if missing.
	DefaultBucket = "fencekit-demo"
	// ReportsTable is the demo's guarded PostgreSQL table (in the schema).
	ReportsTable = "demo_reports"
)

// Conn is where the demo finds PostgreSQL and MinIO.
type Conn struct {
	DatabaseURL    string
	MinIOEndpoint  string // host:port
	MinIOAccessKey string
	MinIOSecretKey string
	Schema         string
	Bucket         string
}

// firstEnv returns the first non-empty variable of names, else def.
func firstEnv(getenv func(string) string, def string, names ...string) string {
	for _, n := range names {
		if v := getenv(n); v != "" {
			return v
		}
	}
	return def
}

// register adds the connection flags to fs, with defaults from the
// environment: FENCEKIT_* first, then TEST_*, then the local services.
func (c *Conn) register(fs *flag.FlagSet, getenv func(string) string) {
	fs.StringVar(&c.DatabaseURL, "database-url",
		firstEnv(getenv, DefaultDatabaseURL, "FENCEKIT_DATABASE_URL", "TEST_DATABASE_URL"),
		"PostgreSQL URL (env FENCEKIT_DATABASE_URL, then TEST_DATABASE_URL)")
	fs.StringVar(&c.MinIOEndpoint, "minio-endpoint",
		firstEnv(getenv, DefaultMinIOEndpoint, "FENCEKIT_MINIO_ENDPOINT", "TEST_MINIO_ENDPOINT"),
		"MinIO host:port (env FENCEKIT_MINIO_ENDPOINT, then TEST_MINIO_ENDPOINT)")
	fs.StringVar(&c.MinIOAccessKey, "minio-access-key",
		firstEnv(getenv, DefaultMinIOAccessKey, "FENCEKIT_MINIO_ACCESS_KEY", "TEST_MINIO_ACCESS_KEY"),
		"MinIO access key (env FENCEKIT_MINIO_ACCESS_KEY, then TEST_MINIO_ACCESS_KEY)")
	fs.StringVar(&c.MinIOSecretKey, "minio-secret-key",
		firstEnv(getenv, DefaultMinIOSecretKey, "FENCEKIT_MINIO_SECRET_KEY", "TEST_MINIO_SECRET_KEY"),
		"MinIO secret key (env FENCEKIT_MINIO_SECRET_KEY, then TEST_MINIO_SECRET_KEY)")
	fs.StringVar(&c.Schema, "schema", DefaultSchema, "PostgreSQL schema for the demo's leases, marks and table (migrated if needed)")
	fs.StringVar(&c.Bucket, "bucket", DefaultBucket, "MinIO bucket for the demo's reports (created if missing)")
}

func (c Conn) validate() error {
	if err := migrations.ValidateIdentifier(c.Schema); err != nil {
		return usagef("--schema: %v", err)
	}
	if _, err := pgxpool.ParseConfig(c.DatabaseURL); err != nil {
		return usagef("--database-url: %v", err)
	}
	if _, _, err := net.SplitHostPort(c.MinIOEndpoint); err != nil {
		return usagef("--minio-endpoint %q: want host:port", c.MinIOEndpoint)
	}
	if c.Bucket == "" {
		return usagef("--bucket is empty")
	}
	return nil
}

// ServiceError reports a service that could not be reached or prepared. It
// maps to ExitFailed.
type ServiceError struct {
	Service string // "PostgreSQL" or "MinIO"
	Addr    string
	Err     error
}

func (e *ServiceError) Error() string {
	return fmt.Sprintf("demo: %s at %s: %v (is it running? `make services` starts it)", e.Service, e.Addr, e.Err)
}

// Unwrap returns the cause.
func (e *ServiceError) Unwrap() error { return e.Err }

// openPool opens and pings a pool to url; dial, when non-empty, replaces the
// host:port dialled (used to route run A through a proxy).
func openPool(ctx context.Context, url, dial string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, usagef("--database-url: %v", err)
	}
	cfg.MaxConns = 4
	if dial != "" {
		host, port, err := net.SplitHostPort(dial)
		if err != nil {
			return nil, err
		}
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return nil, err
		}
		cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(p)
		cfg.ConnConfig.Fallbacks = nil
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(pctx, cfg)
	if err == nil {
		err = pool.Ping(pctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		return nil, &ServiceError{Service: "PostgreSQL", Addr: pgAddr(cfg), Err: err}
	}
	return pool, nil
}

func pgAddr(cfg *pgxpool.Config) string {
	return net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
}

// pgTarget is the host:port of url, for a TCP proxy in front of it.
func pgTarget(url string) (string, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return "", usagef("--database-url: %v", err)
	}
	if len(cfg.ConnConfig.Host) > 0 && cfg.ConnConfig.Host[0] == '/' {
		return "", usagef("--database-url: the scenario needs a TCP address (it routes run A through a TCP proxy), not the socket %s", cfg.ConnConfig.Host)
	}
	return pgAddr(cfg), nil
}

// newMinIO returns a client for endpoint (host:port, plain HTTP).
func newMinIO(c Conn, endpoint string) (*minio.Client, error) {
	cl, err := minio.New(endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(c.MinIOAccessKey, c.MinIOSecretKey, ""),
		Secure: false,
		Region: "us-east-1", // no bucket-location round trip
	})
	if err != nil {
		return nil, usagef("--minio-endpoint: %v", err)
	}
	return cl, nil
}

var minioMakeOpts = minio.MakeBucketOptions{}

// prepare migrates the schema (lease and guard sets plus the demo table) and
// creates the bucket if missing. Both are idempotent and safe to run
// concurrently.
func prepare(ctx context.Context, pool *pgxpool.Pool, cl *minio.Client, c Conn) error {
	if _, err := migrations.Migrate(ctx, pool, migrations.Options{Schema: c.Schema}, migrations.Lease, migrations.Guard); err != nil {
		return fmt.Errorf("demo: migrate schema %s: %w", c.Schema, err)
	}
	if err := ensureTable(ctx, pool, c.Schema); err != nil {
		return err
	}
	ok, err := cl.BucketExists(ctx, c.Bucket)
	if err != nil {
		return &ServiceError{Service: "MinIO", Addr: c.MinIOEndpoint, Err: err}
	}
	if !ok {
		if err := cl.MakeBucket(ctx, c.Bucket, minioMakeOpts); err != nil {
			code := minio.ToErrorResponse(err).Code
			if code != "BucketAlreadyOwnedByYou" && code != "BucketAlreadyExists" {
				return &ServiceError{Service: "MinIO", Addr: c.MinIOEndpoint, Err: err}
			}
		}
	}
	return nil
}

// ensureTable creates the demo's guarded table if it is missing.
func ensureTable(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	q, err := migrations.QuoteIdentifier(schema)
	if err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+q+`.`+ReportsTable+` (
    id         bigserial   PRIMARY KEY,
    resource   text        NOT NULL,
    token      bigint      NOT NULL,
    run_id     uuid        NOT NULL,
    writer     text        NOT NULL,
    body       text        NOT NULL,
    written_at timestamptz NOT NULL DEFAULT clock_timestamp()
)`); err != nil && !isDuplicate(err) { // two first runs at once may race on IF NOT EXISTS
		return fmt.Errorf("demo: create %s.%s: %w", schema, ReportsTable, err)
	}
	return nil
}

func isDuplicate(err error) bool {
	var pe interface{ SQLState() string }
	if errors.As(err, &pe) {
		switch pe.SQLState() {
		case "23505", "42P07": // unique_violation (pg_type), duplicate_table
			return true
		}
	}
	return false
}
