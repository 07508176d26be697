package fencetest

import (
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ExecModes are every pgx query execution mode, in the order of pgx's
// constants. QueryExecModeExec and QueryExecModeSimpleProtocol are the ones
// connection poolers (PgBouncer in transaction mode, RDS Proxy, hosted
// poolers) require: every parameter then travels in text format.
var ExecModes = []pgx.QueryExecMode{
	pgx.QueryExecModeCacheStatement,
	pgx.QueryExecModeCacheDescribe,
	pgx.QueryExecModeDescribeExec,
	pgx.QueryExecModeExec,
	pgx.QueryExecModeSimpleProtocol,
}

// ExecModeEnv names the environment variable that narrows ExecModesToTest:
// a comma-separated list of mode names ("exec,simple_protocol").
const ExecModeEnv = "TEST_PGX_EXEC_MODES"

// ParseExecMode returns the mode with the name pgx gives it in a connection
// string's default_query_exec_mode ("cache_statement", "cache_describe",
// "describe_exec", "exec", "simple_protocol").
func ParseExecMode(name string) (pgx.QueryExecMode, error) {
	for _, m := range ExecModes {
		if ExecModeName(m) == name {
			return m, nil
		}
	}
	return 0, fmt.Errorf("fencetest: unknown pgx exec mode %q (want one of cache_statement, cache_describe, describe_exec, exec, simple_protocol)", name)
}

// ExecModeName is mode's name in a connection string's
// default_query_exec_mode ("simple_protocol"; pgx's String gives "simple
// protocol").
func ExecModeName(mode pgx.QueryExecMode) string {
	return strings.ReplaceAll(mode.String(), " ", "_")
}

// ExecModesToTest returns the modes named in TEST_PGX_EXEC_MODES, or every
// mode when it is unset. A bad name fails the test.
func ExecModesToTest(t testing.TB) []pgx.QueryExecMode {
	t.Helper()
	v := strings.TrimSpace(os.Getenv(ExecModeEnv))
	if v == "" {
		return ExecModes
	}
	var out []pgx.QueryExecMode
	for _, name := range strings.Split(v, ",") {
		m, err := ParseExecMode(strings.TrimSpace(name))
		if err != nil {
			t.Fatalf("%s: %v", ExecModeEnv, err)
		}
		out = append(out, m)
	}
	return out
}

// URLWithExecMode returns the connection URL u with default_query_exec_mode
// set to mode, so that every connection opened from it — by pgxpool, by
// pgx.Connect or by database/sql through github.com/jackc/pgx/v5/stdlib —
// uses that mode.
func URLWithExecMode(u string, mode pgx.QueryExecMode) (string, error) {
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "postgres" && p.Scheme != "postgresql") {
		return "", fmt.Errorf("fencetest: %q is not a postgres:// URL", u)
	}
	q := p.Query()
	q.Set("default_query_exec_mode", ExecModeName(mode))
	p.RawQuery = q.Encode()
	return p.String(), nil
}

// PoolInMode opens a new, independent pool to the test database whose
// connections use mode, closed when the test ends (see Pool).
func PoolInMode(t testing.TB, mode pgx.QueryExecMode) *pgxpool.Pool {
	t.Helper()
	return PoolAt(t, DatabaseURL(), mode)
}

// PoolAt opens a new, independent pool to the database at u (for example a
// PgBouncer's URL) whose connections use mode, closed when the test ends.
func PoolAt(t testing.TB, u string, mode pgx.QueryExecMode) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		t.Fatalf("fencetest: bad database URL: %v", err)
	}
	cfg.ConnConfig.DefaultQueryExecMode = mode
	return PoolFor(t, cfg)
}
