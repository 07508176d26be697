package mysqlguard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardobs"
)

// RowsConfig configures in-row fencing of one table: the token (and
// optionally the run identity) is kept in columns of the user's own rows,
// and each write is one conditional upsert. No marks table is involved.
type RowsConfig struct {
	// Table is the guarded table (an identifier as Config.Table).
	// Required. Its only unique keys should be Key's: INSERT ... ON
	// DUPLICATE KEY UPDATE updates the row any unique key matches.
	Table string
	// Key names the columns of the table's primary key (or of a unique key
	// on them), in the order their values are passed. Required.
	Key []string
	// Columns names the data columns each write sets, in the order their
	// values are passed. May be empty.
	Columns []string
	// TokenColumn is the BIGINT column holding the token of the write that
	// stored the row. Default DefaultTokenColumn.
	TokenColumn string
	// RunColumn, when set, is a VARBINARY(64) (or VARCHAR(64)) NOT NULL
	// DEFAULT '' column holding that write's run identity; it enables the
	// reuse check (fence.DecideClaim). Empty: run identities are ignored.
	RunColumn string
	// MeterProvider, Logger and TracerProvider as in Config
	// (guard="mysql"); a span covers each Upsert that got past its checks.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	Logger         *slog.Logger
	// Strict is Config.Strict for the rows' resource names (the key's
	// value as text, fence.JoinResource of a composite key's values: a
	// key (account, session, name) names its row lease.Key.Resource(name)).
	Strict bool
}

// DefaultTokenColumn is RowsConfig.TokenColumn's default.
const DefaultTokenColumn = "fence_token"

// Querier runs statements: *sql.DB, *sql.Conn and *sql.Tx implement it.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Rows fences writes to one table whose rows carry their own token. It is
// safe for concurrent use.
type Rows struct {
	table       string
	nKey, nCols int
	withRun     bool
	strict      bool
	upsertSQL   string // the conditional upsert under the whole decision rule
	fastSQL     string // with a run column: the upsert admitting only a higher token or the stored run again ("": none)
	readSQL     string
	lockSQL     string
	rec         *guardobs.Recorder
}

// refusedRetries bounds how often a refused write is tried again when the
// read that names the mark finds the row admitting (it changed between the
// two statements, outside a transaction).
const refusedRetries = 3

// NewRows validates cfg, fills defaults and returns a Rows. It does no I/O;
// the table must exist with the named columns. Every error is a
// *ConfigError (ErrInvalidConfig). Rows holds no database: each write takes
// a Querier that says where its statement runs.
func NewRows(cfg RowsConfig) (*Rows, error) {
	if cfg.TokenColumn == "" {
		cfg.TokenColumn = DefaultTokenColumn
	}
	table, err := quoteIdent("Table", cfg.Table)
	if err != nil {
		return nil, err
	}
	if len(cfg.Key) == 0 {
		return nil, configErr("Key", "at least one column", nil)
	}
	seen := map[string]bool{}
	quote := func(field string, names []string) ([]string, error) {
		out := make([]string, len(names))
		for i, n := range names {
			q, err := quoteIdent(field, n)
			if err != nil {
				return nil, err
			}
			if seen[n] {
				return nil, configErr(field, fmt.Sprintf("column %q named twice", n), nil)
			}
			seen[n] = true
			out[i] = q
		}
		return out, nil
	}
	keys, err := quote("Key", cfg.Key)
	if err != nil {
		return nil, err
	}
	cols, err := quote("Columns", cfg.Columns)
	if err != nil {
		return nil, err
	}
	tok, err := quote("TokenColumn", []string{cfg.TokenColumn})
	if err != nil {
		return nil, err
	}
	run := ""
	if cfg.RunColumn != "" {
		r, err := quote("RunColumn", []string{cfg.RunColumn})
		if err != nil {
			return nil, err
		}
		run = r[0]
	}
	rec, err := guardobs.New(guardobs.Config{Kind: guardobs.KindMySQL, Name: "mysqlguard",
		MeterProvider: cfg.MeterProvider, TracerProvider: cfg.TracerProvider, Logger: cfg.Logger})
	if err != nil {
		return nil, configErr("MeterProvider", "instruments", err)
	}
	r := &Rows{table: cfg.Table, nKey: len(keys), nCols: len(cols), withRun: run != "", strict: cfg.Strict, rec: rec}
	r.statements(table, keys, cols, tok[0], run)
	return r, nil
}

// statements builds the conditional upsert and the reads that name the
// mark. The data columns are assigned first, then the run, then the token:
// each assignment reads only columns assigned after it (see marksFenceSQL).
func (r *Rows) statements(table string, keys, cols []string, tok, run string) {
	names := append(append(append([]string{}, keys...), cols...), tok)
	if run != "" {
		names = append(names, run)
	}
	marks := strings.TrimSuffix(strings.Repeat("?, ", len(names)), ", ")
	admit := admitSQL(tok, run)
	var set []string
	for _, c := range cols {
		set = append(set, c+" = IF("+admit+", VALUES("+c+"), "+c+")")
	}
	if run != "" {
		set = append(set, run+" = IF("+admit+", "+nextRunSQL(tok, run)+", "+run+")")
	}
	set = append(set, refusedSQL(tok, run))
	insert := "INSERT INTO " + table + " (" + strings.Join(names, ", ") + ") VALUES (" + marks + ")\n" +
		"ON DUPLICATE KEY UPDATE\n    "
	r.upsertSQL = insert + strings.Join(set, ",\n    ")
	if run != "" {
		// The fast form: what it admits, the whole rule admits with the
		// same new mark (the claim's token and run), and it names the mark
		// in its reply as the whole form does. It refuses the rest, and a
		// refusal at the claim's own token or over an invalid mark goes to
		// the whole form (Rows.attempts).
		fast := fastAdmitSQL(tok, run)
		set = set[:0]
		for _, c := range cols {
			set = append(set, c+" = IF("+fast+", VALUES("+c+"), "+c+")")
		}
		set = append(set, run+" = IF("+fast+", VALUES("+run+"), "+run+")", decideSQL(tok, fast))
		r.fastSQL = insert + strings.Join(set, ",\n    ")
	}
	var where []string
	for _, k := range keys {
		where = append(where, k+" = ?")
	}
	sel := tok + ", ''"
	if run != "" {
		sel = tok + ", " + run
	}
	r.readSQL = "SELECT " + sel + " FROM " + table + " WHERE " + strings.Join(where, " AND ")
	r.lockSQL = r.readSQL + " FOR UPDATE"
}

// fastAdmitSQL is a part of admitSQL's rule that needs neither the run's
// check nor fence.NextMark's cases: a valid stored token below the claim's,
// or equal to it with the stored run byte for byte the claim's (which was
// validated; both may be empty). It is the usual write: a new token, or
// the same claim again.
func fastAdmitSQL(tok, run string) string {
	return "(" + validSQL(tok) + " AND (" + tok + " < VALUES(" + tok + ") OR (" + tok + " = VALUES(" + tok + ") AND " +
		run + " = CAST(VALUES(" + run + ") AS BINARY))))"
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
// of RowsConfig.Key, values those of RowsConfig.Columns. The row is
// inserted, or updated with its token (and run identity) in its own
// columns, only if the claim is admitted by the token (and run) the row
// holds: one INSERT ... ON DUPLICATE KEY UPDATE whose reply also carries
// the decision, so an admitted or stale write is one round trip. With a
// RunColumn, that statement admits only a higher token or the stored run
// again; a write at the mark's own token under another run, or without
// one, or over an empty stored run, is decided by a second upsert under
// the whole rule, and a refusal there (a reuse) reads the row's run.
//
// q may be a *sql.DB or *sql.Conn (the write is then its own transaction)
// or a *sql.Tx, whose other writes then commit or roll back with it; after
// a refusal or a database error such a transaction has been rolled back.
// The resource named in errors is the key's value as text
// (fence.JoinResource of the values for a composite key) and must pass
// fence.ValidateResource. The upsert sets the session's LAST_INSERT_ID().
// When the upsert (outside a transaction) was sent and no reply came back,
// the error is a *fence.OutcomeUnknownError (fence.ErrOutcomeUnknown): the
// row has no write id to settle it by; sending the same upsert again is
// safe (the same claim is admitted again).
func (r *Rows) Upsert(ctx context.Context, q Querier, key []any, values ...any) error {
	res, err := r.arity(key, values)
	if err != nil {
		return err
	}
	c, err := ctxClaim(ctx, res, r.strict)
	if err != nil {
		return err
	}
	return r.upsert(ctx, q, res, c, key, values)
}

// UpsertClaim is Upsert for a claim passed explicitly, right after the key.
func (r *Rows) UpsertClaim(ctx context.Context, q Querier, key []any, c fence.Claim, values ...any) error {
	res, err := r.arity(key, values)
	if err != nil {
		return err
	}
	if err := args(ctx, res, c, r.strict); err != nil {
		return err
	}
	return r.upsert(ctx, q, res, c, key, values)
}

func (r *Rows) arity(key, values []any) (string, error) {
	if len(key) != r.nKey || len(values) != r.nCols {
		return "", fmt.Errorf("%w: %d key and %d column values for %d key and %d data columns of %s",
			ErrKeyArity, len(key), len(values), r.nKey, r.nCols, r.table)
	}
	res := r.resource(key)
	return res, fence.ValidateResource(res)
}

func (r *Rows) upsert(ctx context.Context, q Querier, res string, c fence.Claim, key, values []any) (err error) {
	ctx, span := r.rec.Start(ctx, res, c)
	defer func() { span.End(err) }()
	if q == nil {
		return fmt.Errorf("%w: Upsert with nil querier", ErrNilArgument)
	}
	tx, inTx := q.(*sql.Tx)
	a := make([]any, 0, len(key)+len(values)+2)
	a = append(append(append(a, key...), values...), int64(c.Token))
	if r.withRun {
		a = append(a, c.Run)
	}
	err = r.attempts(ctx, q, inTx, res, c, key, a)
	if err != nil && inTx {
		rollback(tx)
	}
	r.rec.Decision(ctx, err)
	return fence.WrapContext(ctx, err)
}

// attempts runs the conditional upsert and decides from its insert id; a
// refusal at the mark's token reads the row's run. If that read finds the
// row admitting (changed between the statements, outside a transaction),
// the write is tried again.
func (r *Rows) attempts(ctx context.Context, q Querier, inTx bool, res string, c fence.Claim, key, a []any) error {
	if r.fastSQL != "" {
		// The usual write is admitted by the fast form, a stale one refused
		// by it; the rest (the claim's token with another run, or an
		// invalid mark) is decided by the whole rule below.
		li, err := r.exec(ctx, q, inTx, res, r.fastSQL, a)
		switch {
		case err != nil:
			return err
		case li >= 0:
			return nil
		case li != corruptInsertID && fence.Token(-li) > c.Token:
			return &fence.StaleError{Resource: res, Presented: c.Token, Highest: fence.Token(-li)}
		}
	}
	for range refusedRetries {
		li, err := r.exec(ctx, q, inTx, res, r.upsertSQL, a)
		if err != nil {
			return err
		}
		if li >= 0 {
			return nil
		}
		if li != corruptInsertID && fence.Token(-li) > c.Token {
			return &fence.StaleError{Resource: res, Presented: c.Token, Highest: fence.Token(-li)}
		}
		read := r.readSQL
		if inTx {
			read = r.lockSQL
		}
		var (
			tok int64
			run string
		)
		err = q.QueryRowContext(ctx, read, key...).Scan(&tok, &run)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			continue // deleted meanwhile: try again
		case err != nil:
			return dbError(ctx, r.table, res, "read mark", err)
		}
		mark := fence.Claim{Token: fence.Token(tok), Run: run}
		if err := mark.Validate(); err != nil {
			return &MarkError{Resource: res, Reason: fmt.Sprintf("token %d, run %q", tok, run)}
		}
		if derr := fence.DecideClaim(res, c, mark.Token, mark.Run); derr != nil {
			return derr
		}
	}
	return fmt.Errorf("mysqlguard: upsert %q: row changed under every one of %d attempts: %w", res, refusedRetries, fence.ErrBusy)
}

// exec runs one form of the conditional upsert and returns its insert id:
// 0 or more when admitted (or inserted), minus the mark when refused,
// corruptInsertID over an invalid stored token.
func (r *Rows) exec(ctx context.Context, q Querier, inTx bool, res, stmt string, a []any) (int64, error) {
	sr, err := q.ExecContext(ctx, stmt, a...)
	if err != nil {
		if maybeSent(err) && !inTx {
			return 0, outcomeUnknown(ctx, res, "upsert", err)
		}
		return 0, dbError(ctx, r.table, res, "upsert", err)
	}
	li, err := sr.LastInsertId()
	if err != nil {
		return 0, dbError(ctx, r.table, res, "upsert", err)
	}
	return li, nil
}
