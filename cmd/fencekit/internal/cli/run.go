package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/leaseops"
	"github.com/fencekit/fencekit/sql/migrations"
)

// Exit codes of every fencekit command.
const (
	// ExitOK: the command did what it was asked (also: a revoke of a key
	// nobody holds, a floor status showing grants refused).
	ExitOK = 0
	// ExitFailed: the command failed (database unreachable, statement
	// failed, schema not migrated for validate); the cause is printed.
	ExitFailed = 1
	// ExitUsage: bad command line or input; nothing was sent or changed.
	ExitUsage = 2
	// ExitRefused: refused as unsafe: the floor check failed and grants
	// stay refused.
	ExitRefused = 3
)

// ErrUsage is matched by every *UsageError.
var ErrUsage = errors.New("fencekit: usage")

// UsageError reports a bad command line or input. It maps to ExitUsage.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// Is reports whether target is ErrUsage.
func (e *UsageError) Is(target error) bool { return target == ErrUsage }

func usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// ExitCode maps a command's error to its exit code.
func ExitCode(err error) int {
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, ErrUsage),
		errors.Is(err, migrations.ErrInvalidIdentifier), errors.Is(err, migrations.ErrInvalidVersion),
		errors.Is(err, lease.ErrInvalidKey), errors.Is(err, lease.ErrInvalidRunID),
		errors.Is(err, lease.ErrInvalidConfig), errors.Is(err, lease.ErrInvalidListOptions),
		errors.Is(err, leaseops.ErrInvalidArgument),
		errors.Is(err, pgguard.ErrInvalidArgument), errors.Is(err, pgguard.ErrInvalidConfig):
		return ExitUsage
	case errors.Is(err, lease.ErrTokenFloor), errors.Is(err, lease.ErrFailoverUnchecked):
		return ExitRefused
	}
	return ExitFailed
}

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

// parseFloor reads an operator floor: a decimal integer in 0..MaxFloor.
func parseFloor(flagName, s string) (fence.Token, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err != nil:
		return 0, usagef("%s %q: not a whole number in 0..%d", flagName, s, int64(MaxFloor))
	case v < 0:
		return 0, usagef("%s %d: negative (a floor is 0 or more)", flagName, v)
	case v > int64(MaxFloor):
		return 0, usagef("%s %d: absurd, above %d (2^53, the largest integer every JSON reader keeps exact; at a million grants a second the sequence would take 285 years to get there)", flagName, v, int64(MaxFloor))
	}
	return fence.Token(v), nil
}

// MaxFloor is the largest operator floor the floor commands accept.
const MaxFloor = fence.Token(1 << 53)

// printer writes results: JSON Lines with --json, text otherwise.
type printer struct {
	w    io.Writer
	json bool
}

// result is one printable result.
type result interface{ text(w io.Writer) }

func (p printer) print(v result) {
	if p.json {
		writeJSON(p.w, v)
		return
	}
	v.text(p.w)
}

func writeJSON(w io.Writer, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(errorJSON{Error: "encoding output: " + err.Error(), ExitCode: ExitFailed})
	}
	_, _ = w.Write(append(b, '\n'))
}

type errorJSON struct {
	Error    string `json:"error"`
	ExitCode int    `json:"exit_code"`
}

// ownershipJSON is a key's state as every leases command prints it.
type ownershipJSON struct {
	Account     string     `json:"account"`
	Session     string     `json:"session"`
	State       string     `json:"state"`
	RunID       string     `json:"run_id,omitempty"`
	Token       int64      `json:"token,omitempty"`
	Holder      string     `json:"holder,omitempty"`
	AcquiredAt  *time.Time `json:"acquired_at,omitempty"`
	RenewedAt   *time.Time `json:"renewed_at,omitempty"`
	ExpiresAt   *time.Time `json:"expires_at,omitempty"`
	ReleasedAt  *time.Time `json:"released_at,omitempty"`
	RemainingMS int64      `json:"remaining_ms"`
	DBNow       time.Time  `json:"db_now"`
}

func ownership(o lease.Ownership) ownershipJSON {
	t := func(v time.Time) *time.Time {
		if v.IsZero() {
			return nil
		}
		u := v.UTC()
		return &u
	}
	j := ownershipJSON{
		Account: o.Key.AccountID, Session: o.Key.SessionID, State: o.State.String(),
		Token: int64(o.Token), Holder: o.Holder,
		AcquiredAt: t(o.AcquiredAt), RenewedAt: t(o.RenewedAt), ExpiresAt: t(o.ExpiresAt), ReleasedAt: t(o.ReleasedAt),
		RemainingMS: o.Remaining.Milliseconds(), DBNow: o.DBNow.UTC(),
	}
	if o.State != lease.StateNotFound {
		j.RunID = o.RunID.String()
	}
	return j
}

// describe is one line about a key's state, for people.
func (o ownershipJSON) describe() string {
	k := lease.Key{AccountID: o.Account, SessionID: o.Session}.String()
	switch o.State {
	case lease.StateNotFound.String():
		return k + " was never acquired (or its row was deleted)"
	case lease.StateHeld.String():
		h := ""
		if o.Holder != "" {
			h = fmt.Sprintf(" by %q", o.Holder)
		}
		return fmt.Sprintf("%s is held%s: run %s, token %d, expires in %s", k, h, o.RunID, o.Token,
			(time.Duration(o.RemainingMS) * time.Millisecond).String())
	}
	return fmt.Sprintf("%s is %s: last run %s, token %d", k, o.State, o.RunID, o.Token)
}
