package pgguard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardobs"
	"github.com/fencekit/fencekit/guards/internal/engine"
	"github.com/fencekit/fencekit/sql/migrations"
)

// RowsConfig configures in-row fencing of one table: the token (and
// optionally the run identity) is kept in columns of the user's own rows,
// and each write is one conditional upsert. No marks table is involved.
type RowsConfig struct {
	// Schema of the table. Default "public".
	Schema string
	// Table is the guarded table. Required.
	Table string
	// Key names the columns of the table's primary key or of a unique
	// constraint on them, in the order their values are passed. Required.
	Key []string
	// Columns names the data columns each write sets, in the order their
	// values are passed. May be empty.
	Columns []string
	// TokenColumn is the bigint column holding the token of the write that
	// stored the row. Default "fence_token".
	TokenColumn string
	// RunColumn, when set, is a text NOT NULL column (use DEFAULT '')
	// holding the run identity of that write; it enables the reuse check
	// (fence.DecideClaim). Empty: run identities are ignored.
	RunColumn string
	// LockTimeout bounds the wait for the row's lock when the write runs
	// outside a transaction (set by the statement itself, local to its own
	// implicit transaction). Inside a pgx.Tx or *sql.Tx the caller's
	// settings are left alone. Default 5s; negative leaves the session's
	// setting; positive values must be at least a millisecond.
	LockTimeout time.Duration
	// MeterProvider, Logger and TracerProvider as in Config
	// (guard="postgres"); a span covers each Upsert call.
	MeterProvider  metric.MeterProvider
	Logger         *slog.Logger
	TracerProvider trace.TracerProvider
	// Strict as in Config: a write whose row's resource name (see Upsert)
	// lies outside its claim's scope, or whose claim has no scope, is
	// refused with a *fence.ScopeError before any I/O. A three-column key
	// (account id, session id, name) names its row lease.Key.Resource(name)
	// of that lease key, inside the key's scope.
	Strict bool
}

// DefaultTokenColumn is RowsConfig.TokenColumn's default.
const DefaultTokenColumn = "fence_token"

// Querier runs statements: *pgxpool.Pool, *pgx.Conn and pgx.Tx implement it.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// SQLQuerier runs database/sql statements: *sql.DB, *sql.Conn and *sql.Tx
// implement it.
type SQLQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Rows fences writes to one table whose rows carry their own token. It is
// safe for concurrent use.
type Rows struct {
	schema, table    string
	nKey, nCols      int
	withRun          bool
	lockArg          any
	upsertSQL        string
	readSQL          string
	met              *guardobs.Recorder
	argTok, argLock  int // positions (0-based) in the upsert's arguments
	argRun, argCount int
	args             engine.Args
}

// ErrKeyArity is matched by the error of a write whose key or value count
// does not match RowsConfig.
var ErrKeyArity = errors.New("pgguard: wrong number of key or column values")

// refusedRetries bounds how often a refused write is retried when the read
// that names the mark finds the row gone or admitting (it changed between
// the two statements, outside a transaction).
const refusedRetries = 3

// NewRows validates cfg, fills defaults and returns a Rows. It does no I/O;
// the table must exist with the named columns.
func NewRows(cfg RowsConfig) (*Rows, error) {
	bad := func(field string, err error) error { return configErr(field, "not a valid identifier", err) }
	if cfg.Schema == "" {
		cfg.Schema = migrations.DefaultSchema
	}
	if cfg.TokenColumn == "" {
		cfg.TokenColumn = DefaultTokenColumn
	}
	schema, err := migrations.QuoteIdentifier(cfg.Schema)
	if err != nil {
		return nil, bad("Schema", err)
	}
	table, err := migrations.QuoteIdentifier(cfg.Table)
	if err != nil {
		return nil, bad("Table", err)
	}
	c, err := engine.QuoteColumns("pgguard", cfg.Key, cfg.Columns, cfg.TokenColumn, cfg.RunColumn, func(field, n string) (string, error) {
		q, err := migrations.QuoteIdentifier(n)
		if err != nil {
			return "", bad(field, err)
		}
		return q, nil
	})
	if err != nil {
		return nil, err
	}
	var run []string
	if c.Run != "" {
		run = []string{c.Run}
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
	r := &Rows{
		schema: cfg.Schema, table: cfg.Table,
		nKey: len(c.Key), nCols: len(c.Data), withRun: run != nil,
		lockArg: lockArg, met: met, args: engine.Args{Name: "pgguard", Strict: cfg.Strict, Rec: met},
	}
	r.upsertSQL, r.readSQL = r.statements(schema+"."+table, c.Key, c.Data, c.Token, run)
	return r, nil
}

// statements builds the conditional upsert and the read that names the mark.
func (r *Rows) statements(table string, keys, cols []string, tok string, run []string) (string, string) {
	names := append(append(append([]string{}, keys...), cols...), tok)
	var params []string
	for i := range keys {
		params = append(params, "$"+strconv.Itoa(i+1))
	}
	for i := range cols {
		params = append(params, "$"+strconv.Itoa(len(keys)+i+1))
	}
	r.argTok = len(keys) + len(cols)
	params = append(params, "$"+strconv.Itoa(r.argTok+1)+"::bigint")
	next := r.argTok + 1
	if run != nil {
		names = append(names, run[0])
		r.argRun = next
		params = append(params, "$"+strconv.Itoa(next+1)+"::text")
		next++
	}
	r.argLock = next
	r.argCount = next + 1
	lock := "$" + strconv.Itoa(r.argLock+1) + "::text"

	var set []string
	for _, c := range append(append([]string{}, cols...), tok) {
		set = append(set, c+" = EXCLUDED."+c)
	}
	cond := "r." + tok + " <= EXCLUDED." + tok
	if run != nil {
		rc := run[0]
		set = append(set, rc+" = CASE WHEN EXCLUDED."+rc+" <> '' THEN EXCLUDED."+rc+
			" WHEN r."+tok+" = EXCLUDED."+tok+" THEN r."+rc+" ELSE '' END")
		cond = "r." + tok + " < EXCLUDED." + tok + " OR (r." + tok + " = EXCLUDED." + tok +
			" AND (EXCLUDED." + rc + " = '' OR r." + rc + " = '' OR r." + rc + " = EXCLUDED." + rc + "))"
	}
	upsert := "INSERT INTO " + table + " AS r (" + strings.Join(names, ", ") + ")\n" +
		"SELECT " + strings.Join(params, ", ") + "\n" +
		"WHERE " + lock + " IS NULL OR set_config('lock_timeout', " + lock + ", true) IS NOT NULL\n" +
		"ON CONFLICT (" + strings.Join(keys, ", ") + ") DO UPDATE\n" +
		"SET " + strings.Join(set, ", ") + "\n" +
		"WHERE " + cond

	var where []string
	for i, k := range keys {
		where = append(where, k+" = $"+strconv.Itoa(i+1))
	}
	sel := tok
	if run != nil {
		sel += ", " + run[0]
	} else {
		sel += ", ''"
	}
	read := "SELECT " + sel + " FROM " + table + " WHERE " + strings.Join(where, " AND ")
	return upsert, read
}

// resource names the row in errors and checks: the key's single value as
// text, or fence.JoinResource of the values of a composite key.
func (r *Rows) resource(key []any) string {
	if len(key) == 1 {
		return fmt.Sprint(key[0])
	}
	parts := make([]string, len(key))
	for i, k := range key {
		parts[i] = fmt.Sprint(k)
	}
	return fence.JoinResource(parts...)
}

// Upsert writes one row under the claim ctx carries: key holds the values
// of RowsConfig.Key, values those of RowsConfig.Columns. The row is inserted
// or updated, with the token (and run identity) stored in its own columns,
// only if the claim is admitted by the token (and run) the row holds: one
// conditional statement, which changes zero rows when the claim is refused;
// a second statement then reads the row's token to name it in the
// *fence.StaleError (or *fence.ReusedError).
//
// q may be a pool or connection (the write is then its own transaction) or
// a transaction (pgx.Tx), whose other writes then commit or roll back with
// it; after a refusal or a database error such a transaction has been
// rolled back, as with FenceTx. Errors are InTx's, plus ErrKeyArity; outside
// a transaction the statement is its own COMMIT, so a statement sent
// without an answer coming back is a *fence.OutcomeUnknownError. The
// resource named in errors is the key's value as text (fence.JoinResource
// of the values for a composite key) and must pass fence.ValidateResource.
func (r *Rows) Upsert(ctx context.Context, q Querier, key []any, values ...any) error {
	res, c, err := r.ctxArgs(ctx, key, values)
	if err != nil {
		return err
	}
	return r.upsertPgx(ctx, q, res, c, key, values)
}

// UpsertSQL is Upsert on database/sql: q is a *sql.DB, *sql.Conn or *sql.Tx
// (a *sql.Tx is rolled back after a refusal or database error).
func (r *Rows) UpsertSQL(ctx context.Context, q SQLQuerier, key []any, values ...any) error {
	res, c, err := r.ctxArgs(ctx, key, values)
	if err != nil {
		return err
	}
	return r.upsertStd(ctx, q, res, c, key, values)
}

func (r *Rows) arity(key, values []any) (string, error) {
	if len(key) != r.nKey || len(values) != r.nCols {
		return "", fmt.Errorf("%w: %d key and %d column values for %d key and %d data columns of %s.%s",
			ErrKeyArity, len(key), len(values), r.nKey, r.nCols, r.schema, r.table)
	}
	res := r.resource(key)
	return res, fence.ValidateResource(res)
}

func (r *Rows) ctxArgs(ctx context.Context, key, values []any) (string, fence.Claim, error) {
	res, err := r.arity(key, values)
	if err != nil {
		return "", fence.Claim{}, err
	}
	c, err := r.args.Context(ctx, res)
	return res, c, err
}

// upsertArgs lays out the statement's arguments.
func (r *Rows) upsertArgs(c fence.Claim, key, values []any, inTx bool) []any {
	a := make([]any, r.argCount)
	copy(a, key)
	copy(a[r.nKey:], values)
	a[r.argTok] = int64(c.Token)
	if r.withRun {
		a[r.argRun] = c.Run
	}
	if !inTx {
		a[r.argLock] = r.lockArg
	}
	return a
}

func (r *Rows) upsertPgx(ctx context.Context, q Querier, res string, c fence.Claim, key, values []any) (err error) {
	ctx, span := r.met.Start(ctx, res, c)
	defer func() { span.End(err) }()
	if q == nil {
		return fmt.Errorf("pgguard: Upsert with nil querier: %w", fence.ErrNilArgument)
	}
	tx, inTx := q.(pgx.Tx)
	a := r.upsertArgs(c, key, values, inTx)
	err = r.attempts(ctx, res, c, inTx, func() (bool, error) {
		tag, err := q.Exec(ctx, r.upsertSQL, a...)
		return err == nil && tag.RowsAffected() == 1, err
	}, func() (int64, string, error) {
		var (
			tok int64
			run string
		)
		err := q.QueryRow(ctx, r.readSQL, key...).Scan(&tok, &run)
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, "", nil
		}
		return tok, run, err
	})
	if err != nil && inTx {
		rollback(ctx, tx)
	}
	return err
}

func (r *Rows) upsertStd(ctx context.Context, q SQLQuerier, res string, c fence.Claim, key, values []any) (err error) {
	ctx, span := r.met.Start(ctx, res, c)
	defer func() { span.End(err) }()
	if q == nil {
		return fmt.Errorf("pgguard: UpsertSQL with nil querier: %w", fence.ErrNilArgument)
	}
	tx, inTx := q.(*sql.Tx)
	a := r.upsertArgs(c, key, values, inTx)
	err = r.attempts(ctx, res, c, inTx, func() (bool, error) {
		sr, err := q.ExecContext(ctx, r.upsertSQL, a...)
		if err != nil {
			return false, err
		}
		n, err := sr.RowsAffected()
		return err == nil && n == 1, err
	}, func() (int64, string, error) {
		var (
			tok int64
			run string
		)
		err := q.QueryRowContext(ctx, r.readSQL, key...).Scan(&tok, &run)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, "", nil
		}
		return tok, run, err
	})
	if err != nil && inTx {
		sqlRollback(tx)
	}
	return err
}

// attempts runs the conditional write; when it changed no row, reads the
// row's mark and decides. If the row no longer refuses the claim (deleted
// or rewritten between the two statements), the write is tried again.
// Outside a transaction (inTx false) each write is its own transaction: one
// sent without a reply coming back has an unknown outcome.
func (r *Rows) attempts(ctx context.Context, res string, c fence.Claim, inTx bool,
	write func() (bool, error), read func() (int64, string, error)) error {
	for range refusedRetries {
		if err := fence.ContextError(ctx); err != nil && !inTx {
			return fmt.Errorf("pgguard: upsert %q: not sent: %w", res, err)
		}
		ok, err := write()
		switch {
		case err != nil && inTx:
			return dbError(ctx, r.schema, r.table, res, "upsert", err) // the transaction is rolled back
		case err != nil:
			return commitError(ctx, r.schema, r.table, res, "upsert", err)
		}
		if ok {
			r.met.Decision(ctx, nil)
			return nil
		}
		tok, run, err := read()
		if err != nil {
			return dbError(ctx, r.schema, r.table, res, "read mark", err)
		}
		if derr := fence.DecideClaim(res, c, fence.Token(tok), run); derr != nil {
			r.met.Decision(ctx, derr)
			return fence.WrapContext(ctx, derr)
		}
	}
	return fence.WrapContext(ctx, fmt.Errorf("pgguard: upsert %q: row changed under every one of %d attempts: %w", res, refusedRetries, fence.ErrBusy))
}
