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
	"github.com/fencekit/fencekit/guards/internal/engine"
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
	args        engine.Args
	upsertSQL   string // the conditional upsert under the whole decision rule
	lockSQL     string // the locking read of the row's token and run
	checkSQL    string // CheckTable's probe
	rec         *guardobs.Recorder

	beforeCommit func() // tests: runs just before the COMMIT of a transaction Upsert opened
}

// Beginner opens transactions: *sql.DB and *sql.Conn implement it. Upsert
// runs its statements in a transaction of its own on a Querier that is a
// Beginner and not a *sql.Tx.
type Beginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// NewRows validates cfg, fills defaults and returns a Rows. It does no I/O;
// the table must exist with the named columns. Every error is a
// *fence.ConfigError (fence.ErrInvalidConfig). Rows holds no database: each write takes
// a Querier that says where its statement runs.
func NewRows(cfg RowsConfig) (*Rows, error) {
	if cfg.TokenColumn == "" {
		cfg.TokenColumn = DefaultTokenColumn
	}
	table, err := quoteIdent("Table", cfg.Table)
	if err != nil {
		return nil, err
	}
	c, err := engine.QuoteColumns("mysqlguard", cfg.Key, cfg.Columns, cfg.TokenColumn, cfg.RunColumn, quoteIdent)
	if err != nil {
		return nil, err
	}
	rec, err := guardobs.New(guardobs.Config{Kind: "mysql", Name: "mysqlguard",
		MeterProvider: cfg.MeterProvider, TracerProvider: cfg.TracerProvider, Logger: cfg.Logger})
	if err != nil {
		return nil, configErr("MeterProvider", "instruments", err)
	}
	r := &Rows{table: cfg.Table, nKey: len(c.Key), nCols: len(c.Data), withRun: c.Run != "", rec: rec,
		args: engine.Args{Name: "mysqlguard", Strict: cfg.Strict, Rec: rec}}
	r.statements(table, c.Key, c.Data, c.Token, c.Run)
	return r, nil
}

// statements builds the conditional upsert and the locking read that
// decides it. The data columns are assigned first, then the run, then the
// token: each assignment reads only columns assigned after it (see
// marksFenceSQL).
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
	set = append(set, tok+" = IF("+admit+", VALUES("+tok+"), "+tok+")")
	r.upsertSQL = "INSERT INTO " + table + " (" + strings.Join(names, ", ") + ") VALUES (" + marks + ")\n" +
		"ON DUPLICATE KEY UPDATE\n    " + strings.Join(set, ",\n    ")
	var where []string
	for _, k := range keys {
		where = append(where, k+" = ?")
	}
	sel := tok + ", ''"
	if run != "" {
		sel = tok + ", " + run
	}
	r.lockSQL = "SELECT " + sel + " FROM " + table + " WHERE " + strings.Join(where, " AND ") + " FOR UPDATE"
	r.checkSQL = "SELECT 1 FROM " + table + " WHERE 1 = 0 AND " + strings.Join(names, " IS NULL AND ") + " IS NULL"
}

// CheckTable checks, on q, that the table exists with every column
// RowsConfig names: a *TableError (ErrTableMismatch) otherwise, so a wrong
// table shows up before the first write. NewRows does no I/O (it has no
// database).
func (r *Rows) CheckTable(ctx context.Context, q Querier) error {
	return checkTable(ctx, q, r.table, r.checkSQL)
}

// resource names the row in errors and checks: the key's single value as
// text, or fence.JoinResource of the values of a composite key.
func (r *Rows) resource(key []any) string {
	if len(key) == 1 {
		return keyText(key[0])
	}
	parts := make([]string, len(key))
	for i, k := range key {
		parts[i] = keyText(k)
	}
	return fence.JoinResource(parts...)
}

// keyText is a key value as text: a []byte's own bytes (the value the
// server stores), anything else as fmt.Sprint writes it.
func keyText(k any) string {
	if b, ok := k.([]byte); ok {
		return string(b)
	}
	return fmt.Sprint(k)
}

// Upsert writes one row under the claim ctx carries: key holds the values
// of RowsConfig.Key, values those of RowsConfig.Columns. The row is
// inserted, or updated with its token (and run identity) in its own
// columns, only if the claim is admitted by the token (and run) the row
// holds: one INSERT ... ON DUPLICATE KEY UPDATE that changes nothing when
// the claim is refused, followed in the same transaction by a locking read
// of the row's token and run, which decides (see the package
// documentation: the decision never depends on the statement's reply, so
// the user's triggers cannot change it).
//
// q may be a *sql.Tx: both statements run in it, and its other writes
// then commit or roll back with it; after a refusal or a database error
// it has been rolled back. q may be a *sql.DB or *sql.Conn (any Beginner):
// Upsert then opens a transaction on it (the server's isolation level),
// runs both statements, and commits an admitted write (rolls a refused one
// back). Any other Querier is refused with fence.ErrNilArgument.
//
// The resource named in errors is the key's value as text (a []byte's
// bytes; fence.JoinResource of the values for a composite key) and must
// pass fence.ValidateResource. When the COMMIT of a transaction Upsert
// opened was sent and no reply came back, the error is a
// *fence.OutcomeUnknownError (fence.ErrOutcomeUnknown): the row has no
// write id to settle it by; sending the same upsert again is safe (the same
// claim is admitted again). Once ctx ends, the COMMIT's wait ends with it.
func (r *Rows) Upsert(ctx context.Context, q Querier, key []any, values ...any) error {
	if ctx == nil {
		return r.args.NilArgument("", "Upsert with nil ctx")
	}
	res, err := r.arity(key, values)
	if err != nil {
		return err
	}
	c, err := r.args.Context(ctx, res)
	if err != nil {
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
	defer func() {
		r.rec.Decision(ctx, err)
		span.End(err)
	}()
	a := make([]any, 0, len(key)+len(values)+2)
	a = append(append(append(a, key...), values...), int64(c.Token))
	if r.withRun {
		a = append(a, c.Run)
	}
	switch q := q.(type) {
	case nil:
		return fmt.Errorf("mysqlguard: Upsert with nil querier: %w", fence.ErrNilArgument)
	case *sql.Tx:
		if q == nil {
			return fmt.Errorf("mysqlguard: Upsert with nil *sql.Tx: %w", fence.ErrNilArgument)
		}
		if err := r.decide(ctx, q, res, c, key, a); err != nil {
			rollback(q)
			return fence.WrapContext(ctx, err)
		}
		return nil
	case Beginner:
		return fence.WrapContext(ctx, r.ownTx(ctx, q, res, c, key, a))
	}
	return fmt.Errorf("mysqlguard: Upsert's querier %T is neither a *sql.Tx nor a Beginner (*sql.DB, *sql.Conn): %w", q, fence.ErrNilArgument)
}

// ownTx runs the upsert and its decision in a transaction of its own on b
// and commits it when the claim was admitted.
func (r *Rows) ownTx(ctx context.Context, b Beginner, res string, c fence.Claim, key, a []any) error {
	tx, err := b.BeginTx(ctx, nil)
	if err != nil {
		return dbError(ctx, r.table, res, "begin", err)
	}
	defer rollback(tx) // no-op (sql.ErrTxDone) after the commit
	if err := r.decide(ctx, tx, res, c, key, a); err != nil {
		return err
	}
	if r.beforeCommit != nil {
		r.beforeCommit()
	}
	sent, err := commitTx(ctx, tx)
	if err == nil {
		return nil
	}
	if !sent {
		return dbError(ctx, r.table, res, "commit", err)
	}
	return outcomeUnknown(ctx, res, "commit", err)
}

// decide runs the conditional upsert in tx, then reads the row back with a
// locking read in the same transaction and decides from what it holds.
//
// The upsert leaves the row exclusively locked by tx (inserted, updated or
// left as it was), so the locking read (which reads the latest version,
// under every isolation level) returns the row exactly as the upsert left
// it. If the claim was admitted, the row holds fence.NextMark of the old
// mark and the claim, which fence.DecideClaim admits; if it was refused,
// the row holds the old mark, which refuses it again. So deciding over the
// row read back is deciding over the row the upsert found, without
// relying on anything the statement's reply carries.
func (r *Rows) decide(ctx context.Context, tx *sql.Tx, res string, c fence.Claim, key, a []any) error {
	if _, err := tx.ExecContext(ctx, r.upsertSQL, a...); err != nil {
		return stmtError(ctx, r.table, res, "upsert", err)
	}
	var (
		tok sql.NullInt64
		run sql.NullString
	)
	err := tx.QueryRowContext(ctx, r.lockSQL, key...).Scan(&tok, &run)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return &fence.ForeignError{Source: "mysqlguard", Resource: res, Reason: "the row is gone right after the upsert (a trigger?)"}
	case err != nil:
		return stmtError(ctx, r.table, res, "read mark", err)
	case !tok.Valid:
		return &fence.ForeignError{Source: "mysqlguard", Resource: res, Reason: "token is NULL"}
	case tok.Int64 < 1:
		return &fence.ForeignError{Source: "mysqlguard", Resource: res, Reason: fmt.Sprintf("token %d", tok.Int64)}
	case fence.Token(tok.Int64) > c.Token:
		return &fence.StaleError{Resource: res, Presented: c.Token, Highest: fence.Token(tok.Int64)}
	case fence.Token(tok.Int64) < c.Token:
		return &fence.ForeignError{Source: "mysqlguard", Resource: res, Reason: fmt.Sprintf("token %d below the admitted claim's %d after the upsert (a trigger changed it?)", tok.Int64, c.Token)}
	case !run.Valid:
		return &fence.ForeignError{Source: "mysqlguard", Resource: res, Reason: fmt.Sprintf("token %d, run NULL", tok.Int64)}
	}
	mark := fence.Claim{Token: fence.Token(tok.Int64), Run: run.String}
	if err := mark.Validate(); err != nil {
		return &fence.ForeignError{Source: "mysqlguard", Resource: res, Reason: fmt.Sprintf("token %d, run %q", tok.Int64, run.String)}
	}
	return fence.DecideClaim(res, c, mark.Token, mark.Run)
}
