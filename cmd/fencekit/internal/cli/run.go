package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/sql/migrations"
)

// globals are the flags every command takes.
type globals struct {
	databaseURL string
	schema      string
	json        bool
	timeout     time.Duration
}

func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.databaseURL, "database-url", "", "PostgreSQL connection string (default $DATABASE_URL)")
	fs.StringVar(&g.schema, "schema", "", `schema name (default "public")`)
	fs.BoolVar(&g.json, "json", false, "one JSON object per line on stdout")
	fs.DurationVar(&g.timeout, "timeout", 0, "deadline of the whole command")
}

func (g *globals) schemaName() string {
	if g.schema == "" {
		return migrations.DefaultSchema
	}
	return g.schema
}

func globalTakesValue(name string) bool {
	switch name {
	case "database-url", "schema", "timeout":
		return true
	}
	return false
}

func isGlobalFlag(name string) bool { return globalTakesValue(name) || name == "json" }

// runner is one command's run: its flags, output and connections.
type runner struct {
	env     Env
	cmd     command
	g       globals
	printer printer
	pools   []*pgxpool.Pool
	closers []func()
}

func (r *runner) close() {
	for i := len(r.closers) - 1; i >= 0; i-- {
		r.closers[i]()
	}
	for _, p := range r.pools {
		p.Close()
	}
}

// onClose runs f when the command ends, before the pools close.
func (r *runner) onClose(f func()) { r.closers = append(r.closers, f) }

// warnf prints a message for people on stderr.
func (r *runner) warnf(format string, args ...any) {
	fmt.Fprintf(r.env.Stderr, "fencekit %s: %s\n", r.cmd.path(), fmt.Sprintf(format, args...))
}

// dbConfig validates a connection string (flag name for messages; "" uses
// --database-url or $DATABASE_URL). It does no I/O.
func (r *runner) dbConfig(flagName, url string) (*pgxpool.Config, error) {
	if flagName == "" {
		flagName, url = "--database-url", r.g.databaseURL
		if url == "" {
			url = r.env.Getenv("DATABASE_URL")
			flagName = "$DATABASE_URL"
		}
		if url == "" {
			return nil, usagef("no database: set --database-url or $DATABASE_URL")
		}
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, usagef("%s: %v", flagName, err)
	}
	cfg.MaxConns = 4
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "fencekit-cli"
	}
	return cfg, nil
}

// pool opens a pool for cfg (no I/O yet); it is closed when the command ends.
func (r *runner) pool(ctx context.Context, cfg *pgxpool.Config) (*pgxpool.Pool, error) {
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, usagef("%v", err)
	}
	r.pools = append(r.pools, p)
	return p, nil
}

// ping checks that the database answers, so that an unreachable one fails
// with its cause before any command-specific statement.
// database opens a pool on --database-url and pings it: the first step of
// every command that reads or changes the lease database.
func (r *runner) database(ctx context.Context) (*pgxpool.Pool, error) {
	cfg, err := r.dbConfig("", "")
	if err != nil {
		return nil, err
	}
	p, err := r.pool(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := ping(ctx, p, "database"); err != nil {
		return nil, err
	}
	return p, nil
}

func ping(ctx context.Context, p *pgxpool.Pool, what string) error {
	if err := p.Ping(ctx); err != nil {
		c := p.Config().ConnConfig
		return fmt.Errorf("cannot reach the %s at %s:%d (database %s): %w", what, c.Host, c.Port, c.Database, err)
	}
	return nil
}

// retryable reports whether err means the database does not accept writes
// yet — a standby not promoted yet or being promoted (SQLSTATE 25006
// read_only_sql_transaction; 55000 "recovery is in progress" from the WAL
// functions), a server starting or shutting down (57P01..57P03), a refused
// or lost connection — so that the floor commands, which are safe to
// repeat, wait for it.
func retryable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "25006", "57P01", "57P02", "57P03":
			return true
		case "55000":
			return strings.Contains(pe.Message, "recovery is in progress")
		}
		return false
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}
