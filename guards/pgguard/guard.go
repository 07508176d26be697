package pgguard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardobs"
	"github.com/fencekit/fencekit/guards/internal/engine"
	"github.com/fencekit/fencekit/internal/pgerr"
	"github.com/fencekit/fencekit/sql/migrations"
)

// DB is the pgx database a Guard opens its transactions on and reads marks
// from: *pgxpool.Pool and *pgx.Conn implement it (and Batcher).
type DB interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Batcher sends a pgx.Batch; *pgxpool.Pool and *pgx.Conn implement it.
// When Config.DB implements it, the Guard sends BEGIN and the fence
// statement as one batch (one round trip); otherwise it begins with
// DB.BeginTx and sends the fence statement after.
type Batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// SQLDB is the database/sql database a Guard opens its transactions on and
// reads marks from: *sql.DB and *sql.Conn implement it.
type SQLDB interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Config configures a Guard.
type Config struct {
	// DB is the pgx database (a *pgxpool.Pool or *pgx.Conn) the Guard
	// opens the transactions of InTx, Begin and Fence on, and reads marks
	// from. The marks table and the guarded data must both live in it.
	DB DB
	// SQLDB is the database/sql database (a *sql.DB or *sql.Conn, with any
	// driver that speaks PostgreSQL, such as github.com/jackc/pgx/v5/stdlib)
	// the Guard opens the transactions of InSQLTx on; Fence and Mark use it
	// when DB is nil. It must reach the same database as DB.
	//
	// At least one of DB and SQLDB is required (New returns a *fence.ConfigError
	// otherwise). A method that needs the one not set returns a
	// *fence.ConfigError and does nothing: InTx and Begin need DB, InSQLTx needs
	// SQLDB. FenceTx and FenceSQLTx work in the caller's transaction and
	// need neither.
	SQLDB SQLDB
	// Schema holds the fencekit_guard_marks table (created by
	// migrations.Migrate(..., migrations.Guard)). It must pass
	// migrations.ValidateIdentifier. Default "public".
	Schema string
	// IsoLevel is the isolation level of the transactions the Guard opens
	// (InTx, Begin, InSQLTx, Fence): pgx.ReadCommitted (the default),
	// pgx.RepeatableRead or pgx.Serializable. It does not affect the
	// transactions a caller opens and hands to FenceTx or FenceSQLTx.
	IsoLevel pgx.TxIsoLevel
	// LockTimeout bounds how long a transaction the Guard opens waits for a
	// mark's row lock held by another transaction. It is set, local to that
	// transaction, by the fence statement itself before it takes the lock,
	// so it costs no statement of its own; it stays in force for the rest of
	// the transaction. A timeout yields an error matching fence.ErrBusy.
	// Default 5s; negative leaves the session's setting. Positive values
	// must be at least a millisecond. FenceTx and FenceSQLTx never change
	// the caller's transaction settings: their waits are bounded by ctx and
	// by the caller's own lock_timeout.
	LockTimeout time.Duration
	// MeterProvider records fencekit.guard.accepted (fence statements that
	// admitted the claim; the transaction may still roll back),
	// fencekit.guard.stale, fencekit.guard.token_gap and
	// fencekit.guard.reused with guard="postgres" (see docs/operations.md).
	// Nil records nothing.
	MeterProvider metric.MeterProvider
	// Logger receives an Error record for every write refused because its
	// token was reused by another run. Nil discards.
	Logger *slog.Logger
	// TracerProvider records one span ("fencekit.guard.write", a child of the
	// span in ctx) per InTx, InSQLTx and Fence call (fence statement, the
	// caller's function and COMMIT), per Begin, FenceTx and FenceSQLTx
	// call (the fence statement), and per call refused before any I/O.
	// Nil records none.
	TracerProvider trace.TracerProvider
	// Strict refuses, before any I/O, every write whose resource lies
	// outside its claim's scope (fence.CheckScope: a lease's claim is
	// scoped to its key, lease.Key.Scope), and every write whose claim has
	// no scope, with a *fence.ScopeError (fence.ErrOutOfScope): a claim for
	// one key can then never raise the mark of another key's resource.
	// Off by default: scopes are ignored.
	Strict bool
}

// DefaultLockTimeout is Config.LockTimeout's default.
const DefaultLockTimeout = 5 * time.Second

// MarksTable is the name of the high-water-mark table inside Config.Schema.
const MarksTable = "fencekit_guard_marks"

// configErr is the *fence.ConfigError of a pgguard Config field.
func configErr(field, reason string, err error) error {
	return &fence.ConfigError{Source: "pgguard", Field: field, Reason: reason, Err: err}
}

// Guard fences PostgreSQL writes with the high-water marks in
// Config.Schema's fencekit_guard_marks table. It is safe for concurrent use.
type Guard struct {
	db       DB
	sqlDB    SQLDB
	schema   string
	iso      pgx.TxIsoLevel
	sqlIso   sql.IsolationLevel
	lockArg  any // "5000ms", or nil: leave the session's lock_timeout
	fenceSQL string
	readSQL  string
	met      *guardobs.Recorder
	args     engine.Args
}

var _ fence.Guard = (*Guard)(nil)

// New validates cfg, fills defaults and returns a Guard. It does no I/O.
func New(cfg Config) (*Guard, error) {
	if cfg.Schema == "" {
		cfg.Schema = migrations.DefaultSchema
	}
	schema, err := migrations.QuoteIdentifier(cfg.Schema)
	if err != nil {
		return nil, configErr("Schema", "not a valid identifier", err)
	}
	var sqlIso sql.IsolationLevel
	switch cfg.IsoLevel {
	case "", pgx.ReadCommitted:
		cfg.IsoLevel, sqlIso = pgx.ReadCommitted, sql.LevelReadCommitted
	case pgx.RepeatableRead:
		sqlIso = sql.LevelRepeatableRead
	case pgx.Serializable:
		sqlIso = sql.LevelSerializable
	default:
		return nil, configErr("IsoLevel", fmt.Sprintf("%q (want read committed, repeatable read or serializable)", cfg.IsoLevel), nil)
	}
	lockArg, err := lockTimeoutArg(cfg.LockTimeout)
	if err != nil {
		return nil, err
	}
	met, err := guardobs.New(guardobs.Config{Kind: "postgres", Name: "pgguard",
		MeterProvider: cfg.MeterProvider, TracerProvider: cfg.TracerProvider, Logger: cfg.Logger})
	if err != nil {
		return nil, configErr("MeterProvider", "instruments", err)
	}
	if cfg.DB == nil && cfg.SQLDB == nil {
		return nil, configErr("DB", "nil, and SQLDB nil too: set one (DB for pgx, SQLDB for database/sql) or both", nil)
	}
	table := schema + "." + MarksTable
	return &Guard{
		db:       cfg.DB,
		sqlDB:    cfg.SQLDB,
		schema:   cfg.Schema,
		iso:      cfg.IsoLevel,
		sqlIso:   sqlIso,
		lockArg:  lockArg,
		met:      met,
		args:     engine.Args{Name: "pgguard", Strict: cfg.Strict, Rec: met},
		fenceSQL: marksFenceSQL(table),
		readSQL:  `SELECT highest_token, run FROM ` + table + ` WHERE resource = $1`,
	}, nil
}

// lockTimeoutArg validates a LockTimeout and returns the set_config value
// the fence statement binds (nil: leave the session's setting).
func lockTimeoutArg(d time.Duration) (any, error) {
	if d == 0 {
		d = DefaultLockTimeout
	}
	if d < 0 {
		return nil, nil
	}
	if d < time.Millisecond {
		return nil, configErr("LockTimeout", fmt.Sprintf("%v below 1ms (PostgreSQL would read it as 0, no timeout)", d), nil)
	}
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms", nil
}

// marksFenceSQL is the one fence statement of the marks mode. Its SELECT
// sets the optional lock bound ($4, local to the transaction) before the
// insert can wait for the mark's row lock. The upsert takes (and keeps until
// the end of the transaction) that lock, so concurrent holders serialise; on
// conflict it works on the latest committed row version even when the
// statement's snapshot cannot see it, so RETURNING yields the exact mark
// after the decision. The run column follows fence.NextMark when the claim
// is admitted and is left as it was when it is refused (stale or reused); a
// refused statement rewrites the same values and is rolled back with its
// transaction.
func marksFenceSQL(table string) string {
	return `INSERT INTO ` + table + ` AS m (resource, highest_token, run)
SELECT $1::text, $2::bigint, $3::text
WHERE $4::text IS NULL OR set_config('lock_timeout', $4::text, true) IS NOT NULL
ON CONFLICT (resource) DO UPDATE
    SET highest_token = GREATEST(m.highest_token, EXCLUDED.highest_token),
        run = CASE
            WHEN m.highest_token > EXCLUDED.highest_token THEN m.run
            WHEN m.highest_token = EXCLUDED.highest_token
                 AND (EXCLUDED.run = '' OR (m.run <> '' AND m.run <> EXCLUDED.run)) THEN m.run
            ELSE EXCLUDED.run END,
        updated_at = CASE WHEN m.highest_token <= EXCLUDED.highest_token
                          THEN clock_timestamp() ELSE m.updated_at END
RETURNING m.highest_token, m.run`
}

// Schema returns the schema the Guard's marks table lives in.
func (g *Guard) Schema() string { return g.schema }

// decide turns the mark returned by a fence statement into the outcome, and
// records it.
func (g *Guard) decide(ctx context.Context, resource string, c fence.Claim, mark int64, run string) error {
	err := decideMark(resource, c, mark, run)
	g.record(ctx, err)
	return err
}

func decideMark(resource string, c fence.Claim, mark int64, run string) error {
	if fence.Token(mark) < c.Token { // GREATEST cannot return less than the token
		return fmt.Errorf("pgguard: %q: mark %d after fencing with token %d", resource, mark, c.Token)
	}
	return fence.DecideClaim(resource, c, fence.Token(mark), run)
}

// record counts a decision and logs a reuse.
func (g *Guard) record(ctx context.Context, err error) {
	g.met.Decision(ctx, err)
}

// rollbackTimeout bounds rollbacks issued on a path that may run with an
// already cancelled context.
const rollbackTimeout = 5 * time.Second

// cleanupCtx returns a context for cleanup that survives ctx's end.
func cleanupCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
}

// dbError maps a database error of operation op. Once ctx has ended, the
// error matches ctx.Err() and context.Cause(ctx) and never fence.ErrBusy.
func dbError(ctx context.Context, schema, table, resource, op string, err error) error {
	if fence.ContextError(ctx) != nil {
		return fence.WrapContext(ctx, fmt.Errorf("pgguard: %s %q: %w", op, resource, err))
	}
	if what, ok := pgerr.BusyReason(err); ok {
		return fmt.Errorf("pgguard: %s %q: %s: %w: %w", op, resource, what, fence.ErrBusy, err)
	}
	if pgerr.Is(err, pgerr.UndefinedTable, pgerr.UndefinedColumn) {
		return fmt.Errorf("pgguard: %s %q: table %s.%s missing or not migrated (apply migrations.Migrate with set migrations.Guard): %w", op, resource, schema, table, err)
	}
	return fmt.Errorf("pgguard: %s %q: %w", op, resource, err)
}

func (g *Guard) dbError(ctx context.Context, resource, op string, err error) error {
	return dbError(ctx, g.schema, MarksTable, resource, op, err)
}

// commitError maps the error of a request that commits: a COMMIT, or a
// statement that is its own transaction. When err proves that nothing was
// committed (notCommitted) it is a dbError; otherwise the request may have
// committed and the error is a *fence.OutcomeUnknownError, which matches
// ctx.Err() and context.Cause(ctx) too once ctx has ended.
func commitError(ctx context.Context, schema, table, resource, op string, err error) error {
	if notCommitted(err) {
		return dbError(ctx, schema, table, resource, op, err)
	}
	return fence.OutcomeUnknown(ctx, "pgguard: "+op, resource, err)
}

// notCommitted reports whether err, returned for a committing request,
// proves the request did not commit: it was never sent
// (pgconn.SafeToRetry, except pgconn.ErrConnClosed: pgx also reports a
// connection that the server closed while the client waited for the reply
// as "conn closed", which claims SafeToRetry although the request was
// sent; the transaction was already closed), or the server
// answered with an error that ends the transaction (COMMIT answered
// ROLLBACK, or any SQLSTATE error except a FATAL or PANIC one and those of
// classes 08 connection exception, 57 operator intervention other than
// 57014 query canceled, and XX internal error, after which the server may
// have committed before it gave up on the session). Anything else (a
// connection error, a context ended while waiting for the reply) may
// follow a commit.
func notCommitted(err error) bool {
	switch {
	case errors.Is(err, pgconn.ErrConnClosed):
		return false
	case pgconn.SafeToRetry(err), errors.Is(err, pgx.ErrTxClosed), errors.Is(err, sql.ErrTxDone),
		errors.Is(err, pgx.ErrTxCommitRollback):
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		sev := pe.SeverityUnlocalized
		if sev == "" {
			sev = pe.Severity
		}
		if sev == "FATAL" || sev == "PANIC" {
			return false
		}
	}
	switch {
	case pgerr.Is(err, pgerr.QueryCanceled):
		return true
	case pgerr.Code(err) == "", pgerr.HasClass(err, "08", "57", "XX"):
		return false
	}
	return true
}
