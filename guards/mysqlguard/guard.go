package mysqlguard

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"database/sql"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardobs"
	"github.com/fencekit/fencekit/guards/internal/engine"
)

// DefaultTable is Config.Table's default.
const DefaultTable = "fencekit_guard_marks"

// DefaultSettleTimeout is Config.SettleTimeout's default.
const DefaultSettleTimeout = 5 * time.Second

//go:embed schema.sql
var schemaSQL string

// Config configures a Guard (marks mode).
type Config struct {
	// DB is the database the Guard works on: CreateTable creates the marks
	// table in it, InTx and Fence open their transactions on it,
	// Mark reads from it, and a COMMIT whose reply was lost is settled on a
	// fresh connection of it. The marks table and the guarded data must
	// both live in it. Required (New returns a *fence.ConfigError otherwise).
	// FenceTx works in the caller's transaction, which
	// should be on the same database.
	DB *sql.DB
	// Table is the marks table (created by CreateTable). A plain
	// identifier: a lower-case letter or '_', then lower-case letters,
	// digits or '_', at most 64 bytes. Default DefaultTable.
	Table string
	// IsoLevel is the isolation level of the transactions the Guard opens
	// (InTx, Fence): sql.LevelDefault (the server's; REPEATABLE READ unless
	// configured otherwise), sql.LevelReadCommitted, sql.LevelRepeatableRead
	// or sql.LevelSerializable.
	IsoLevel sql.IsolationLevel
	// SettleTimeout bounds the locking read that settles a COMMIT whose
	// reply was lost. Default DefaultSettleTimeout.
	SettleTimeout time.Duration
	// MeterProvider records the guard instruments of package guardobs with
	// guard="mysql". Nil records nothing.
	MeterProvider metric.MeterProvider
	// TracerProvider records one span ("fencekit.guard.write", a child of the
	// span in ctx) per InTx call (fence statement, the caller's function and COMMIT) and per FenceTx call. Nil records none.
	TracerProvider trace.TracerProvider
	// Logger receives an Error record for every write refused because its
	// token was reused by another run. Nil discards.
	Logger *slog.Logger
	// Strict refuses, before any I/O, every write whose resource lies
	// outside its claim's scope (fence.CheckScope: a lease's claim is
	// scoped to its key, lease.Key.Scope), and every write whose claim has
	// no scope, with a *fence.ScopeError (fence.ErrOutOfScope): a claim for
	// one key can then never raise the mark of another key's resource.
	// Off by default: scopes are ignored.
	Strict bool
}

var identRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,63}$`)

// quoteIdent validates a configurable identifier and quotes it.
func quoteIdent(field, name string) (string, error) {
	if !identRE.MatchString(name) {
		return "", configErr(field, fmt.Sprintf("%q: want a lower-case letter or '_', then lower-case letters, digits or '_', at most 64 bytes", name), nil)
	}
	return "`" + name + "`", nil
}

// Guard fences MySQL / MariaDB writes with the high-water marks of its
// marks table, checked by one statement in the write's own transaction.
// It is safe for concurrent use.
type Guard struct {
	db            *sql.DB
	table         string
	iso           sql.IsolationLevel
	settleTimeout time.Duration
	args          engine.Args
	fenceSQL      string
	runSQL        string
	markSQL       string
	settleSQL     string
	checkSQL      string
	createSQL     string
	rec           *guardobs.Recorder

	beforeCommit func()          // tests: runs just before COMMIT is sent
	afterCommit  func(err error) // tests: runs when COMMIT returned
}

var _ fence.Guard = (*Guard)(nil)

// New validates cfg, fills defaults and returns a Guard. It does no I/O.
// Every error is a *fence.ConfigError (fence.ErrInvalidConfig).
func New(cfg Config) (*Guard, error) {
	if cfg.DB == nil {
		return nil, configErr("DB", "nil: the Guard needs the database that holds the marks table and the guarded data", nil)
	}
	if cfg.Table == "" {
		cfg.Table = DefaultTable
	}
	t, err := quoteIdent("Table", cfg.Table)
	if err != nil {
		return nil, err
	}
	switch cfg.IsoLevel {
	case sql.LevelDefault, sql.LevelReadCommitted, sql.LevelRepeatableRead, sql.LevelSerializable:
	default:
		return nil, configErr("IsoLevel", fmt.Sprintf("%v (want default, read committed, repeatable read or serializable)", cfg.IsoLevel), nil)
	}
	switch {
	case cfg.SettleTimeout < 0:
		return nil, configErr("SettleTimeout", fmt.Sprintf("%v is negative", cfg.SettleTimeout), nil)
	case cfg.SettleTimeout == 0:
		cfg.SettleTimeout = DefaultSettleTimeout
	}
	rec, err := guardobs.New(guardobs.Config{Kind: "mysql", Name: "mysqlguard",
		MeterProvider: cfg.MeterProvider, TracerProvider: cfg.TracerProvider, Logger: cfg.Logger})
	if err != nil {
		return nil, configErr("MeterProvider", "instruments", err)
	}
	return &Guard{
		db: cfg.DB, table: cfg.Table, iso: cfg.IsoLevel, settleTimeout: cfg.SettleTimeout, rec: rec,
		args:      engine.Args{Name: "mysqlguard", Strict: cfg.Strict, Rec: rec},
		fenceSQL:  marksFenceSQL(t),
		runSQL:    `SELECT token, run FROM ` + t + ` WHERE resource = ? FOR UPDATE`,
		markSQL:   `SELECT token, run FROM ` + t + ` WHERE resource = ?`,
		settleSQL: `SELECT token, write_id FROM ` + t + ` WHERE resource = ? FOR UPDATE`,
		checkSQL:  `SELECT 1 FROM ` + t + ` WHERE 1 = 0 AND resource = '' AND token = 0 AND run = '' AND write_id = '' AND updated_at IS NULL`,
		createSQL: strings.Replace(schemaSQL, "IF NOT EXISTS "+DefaultTable, "IF NOT EXISTS "+t, 1),
	}, nil
}

// validSQL holds when the stored token is one this guard writes (positive).
func validSQL(tok string) string { return "(" + tok + " >= 1)" }

// admitSQL is the decision rule of fence.DecideClaim over the stored token
// and run (columns tok, run; run "" when there is none) and the claim's
// (VALUES of the same columns). A stored token below 1 admits nothing. The
// stored run matters only when the tokens are equal: only then is it
// checked (REGEXP, as fence.ValidateRun) and compared, so the usual write
// with a higher token evaluates no regular expression; a malformed run at
// an equal token refuses the write, and the guard reports it as a
// *fence.ForeignError after reading it. Runs are compared byte for byte, as
// fence.DecideClaim compares them, whatever the column's collation.
func admitSQL(tok, run string) string {
	if run == "" {
		return "(" + validSQL(tok) + " AND " + tok + " <= VALUES(" + tok + "))"
	}
	return "(" + validSQL(tok) + " AND (" + tok + " < VALUES(" + tok + ") OR (" + tok + " = VALUES(" + tok + ") AND " +
		run + " REGEXP '^[0-9A-Za-z._:-]{0,64}$' AND (VALUES(" + run + ") = '' OR " + run + " = '' OR " + run + " = CAST(VALUES(" + run + ") AS BINARY)))))"
}

// nextRunSQL is fence.NextMark's run.
func nextRunSQL(tok, run string) string {
	return "IF(VALUES(" + run + ") <> '', VALUES(" + run + "), IF(" + tok + " = VALUES(" + tok + "), " + run + ", ''))"
}

// corruptInsertID is the insert id of a write refused because the stored
// mark is not valid (math.MinInt64, which no token's negation gives).
const corruptInsertID = -1 << 63

// refusedSQL assigns the token column: unchanged when the claim is
// refused, the claim's token otherwise. It sets the statement's
// LAST_INSERT_ID to 0 when admitted, to minus the stored token when
// refused, and to corruptInsertID when the stored token is not valid, so
// the OK reply says which, and the mark, without a second statement. An
// inserted row never evaluates it: its insert id is 0 (or the table's
// AUTO_INCREMENT value), never negative. LAST_INSERT_ID(expr) returns
// expr, which is 0 exactly when the claim is admitted (a refusal's value
// is negative and never NULL), so the decision is evaluated once here.
func refusedSQL(tok, run string) string { return decideSQL(tok, admitSQL(tok, run)) }

// decideSQL is refusedSQL under the decision admit.
func decideSQL(tok, admit string) string {
	return tok + " = IF(LAST_INSERT_ID(IF(" + admit + ", 0, IF(" + validSQL(tok) + ", -" + tok +
		", -9223372036854775807 - 1))) = 0, VALUES(" + tok + "), " + tok + ")"
}

// marksFenceSQL is the one fence statement of the marks mode: an upsert
// whose update part changes the row only when the claim is admitted. The
// assignments read only columns assigned after them, so they mean the same
// whether the server assigns left to right (MySQL, MariaDB) or
// simultaneously (MariaDB's SIMULTANEOUS_ASSIGNMENT mode). It takes the
// row's lock until the transaction ends.
func marksFenceSQL(table string) string {
	admit := admitSQL("token", "run")
	return `INSERT INTO ` + table + ` (resource, token, run, write_id) VALUES (?, ?, ?, ?)
ON DUPLICATE KEY UPDATE
    write_id = IF(` + admit + `, VALUES(write_id), write_id),
    updated_at = IF(` + admit + `, CURRENT_TIMESTAMP(6), updated_at),
    run = IF(` + admit + `, ` + nextRunSQL("token", "run") + `, run),
    ` + refusedSQL("token", "run")
}

// CreateTable creates the marks table (schema.sql) in Config.DB if it does
// not exist.
func (g *Guard) CreateTable(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("mysqlguard: CreateTable with nil ctx: %w", fence.ErrNilArgument)
	}
	if _, err := g.db.ExecContext(ctx, g.createSQL); err != nil {
		return fence.WrapContext(ctx, fmt.Errorf("mysqlguard: create table %s: %w", g.table, err))
	}
	return nil
}

// CheckTable checks that the marks table exists in Config.DB with the
// columns the guard uses: a *TableError (ErrTableMismatch) otherwise, so a
// wrong table shows up before the first write. New does no I/O (the table
// may be created after it, by CreateTable); call CheckTable once the table
// should exist.
func (g *Guard) CheckTable(ctx context.Context) error {
	return checkTable(ctx, g.db, g.table, g.checkSQL)
}

// Table returns the marks table's name.
func (g *Guard) Table() string { return g.table }

// InTx runs fn in a transaction fenced for resource under the claim ctx
// carries (fence.ClaimFromContext: a lease's context carries its claim;
// none: fence.ErrNoToken, nothing sent). It begins a transaction on
// Config.DB (isolation Config.IsoLevel), fences it, calls fn with ctx and
// the transaction, and commits. Any error, and a panic in fn, rolls the
// transaction back, so the mark is raised if and only if fn's statements
// commit. fn must not commit or roll back the transaction.
//
// Errors: input errors (fence.ErrInvalidResource, fence.ErrInvalidToken,
// fence.ErrInvalidRun, fence.ErrInvalidScope, fence.ErrNilArgument) and
// *fence.ScopeError under Config.Strict, before any I/O; a refused claim
// is a *fence.StaleError or *fence.ReusedError; deadlock (1213), lock
// wait timeout (1205) and a fence statement whose reply the driver gave up
// on match fence.ErrBusy; fn's error is wrapped with the guard's prefix
// and the resource (errors.Is still finds it). COMMIT is sent under ctx
// (see the package documentation). When COMMIT's reply is lost, the
// outcome is settled by the write's id with a locking read of the mark on
// a fresh connection of Config.DB, on a fresh context
// (context.WithoutCancel plus Config.SettleTimeout) so it runs even when
// ctx has ended: committed is success (nil); not committed is a
// *fence.NotAppliedError; a newer mark a *fence.StaleError with Overtaken;
// otherwise the error is a *fence.OutcomeUnknownError
// (fence.ErrOutcomeUnknown). InTx returns at most Config.SettleTimeout
// after ctx ends.
func (g *Guard) InTx(ctx context.Context, resource string, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return g.args.Claimed(ctx, resource, nil, func(c fence.Claim) error { return g.inTx(ctx, resource, c, fn) })
}

func (g *Guard) inTx(ctx context.Context, resource string, c fence.Claim, fn func(ctx context.Context, tx *sql.Tx) error) (err error) {
	ctx, span := g.rec.Start(ctx, resource, c)
	defer func() { span.End(err) }()
	if fn == nil {
		return fmt.Errorf("mysqlguard: InTx with nil fn: %w", fence.ErrNilArgument)
	}
	tx, err := g.db.BeginTx(ctx, &sql.TxOptions{Isolation: g.iso})
	if err != nil {
		return dbError(ctx, g.table, resource, "begin", err)
	}
	defer rollback(tx) // no-op (sql.ErrTxDone) after Commit
	id := engine.NewWriteID()
	if err := g.fence(ctx, tx, resource, c, id); err != nil {
		return err
	}
	if err := fn(engine.WithoutStager(ctx), tx); err != nil {
		return fence.WrapContext(ctx, fmt.Errorf("mysqlguard: %q: write: %w", resource, err))
	}
	return g.commit(ctx, tx, resource, c, id)
}

// commit commits tx and settles a lost reply on Config.DB.
func (g *Guard) commit(ctx context.Context, tx *sql.Tx, resource string, c fence.Claim, id string) error {
	if g.beforeCommit != nil {
		g.beforeCommit()
	}
	sent, err := commitTx(ctx, tx)
	if g.afterCommit != nil {
		g.afterCommit(err)
	}
	if err == nil {
		return nil
	}
	if !sent {
		return dbError(ctx, g.table, resource, "commit", err)
	}
	return g.settle(ctx, resource, c, id, err)
}

// commitTx commits tx. database/sql's Tx.Commit takes no context, so when
// ctx can end, COMMIT is sent as a statement under ctx instead: the
// driver closes the connection when ctx ends, so the wait for its reply
// ends with ctx; database/sql's transaction is then ended with a ROLLBACK,
// which changes nothing after a COMMIT. sent reports whether COMMIT may
// have reached the server.
func commitTx(ctx context.Context, tx *sql.Tx) (sent bool, err error) {
	if ctx.Done() == nil {
		err = tx.Commit()
		return err == nil || maybeSent(err), err
	}
	if err := fence.ContextError(ctx); err != nil {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, "COMMIT"); err != nil {
		return maybeSent(err), err
	}
	_ = tx.Rollback()
	return true, nil
}

// settle decides a COMMIT whose reply was lost (failed with err) by
// reading the mark with a locking read in a fresh transaction on
// Config.DB, on a fresh context bounded by Config.SettleTimeout. The read
// waits for the transaction whose COMMIT reply was lost to end (committed,
// or rolled back once the server sees its connection gone). The mark
// carries the write id: committed, nil. The mark is below the write's
// token (or absent): the transaction did not commit and, having ended,
// never will: *fence.NotAppliedError. The mark is above it: another
// holder's write came after, and this one may have been applied before it:
// *fence.StaleError with Overtaken. Otherwise (the mark at the write's
// token under another write id, or the read failed) the outcome is
// unknown: *fence.OutcomeUnknownError.
func (g *Guard) settle(ctx context.Context, resource string, c fence.Claim, id string, err error) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.settleTimeout)
	defer cancel()
	tx, berr := g.db.BeginTx(sctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if berr != nil {
		return outcomeUnknown(ctx, resource, "commit", err)
	}
	defer rollback(tx)
	var (
		tok int64
		wid string
	)
	rerr := tx.QueryRowContext(sctx, g.settleSQL, resource).Scan(&tok, &wid)
	switch {
	case errors.Is(rerr, sql.ErrNoRows):
		return notApplied(ctx, resource, "commit", err)
	case rerr != nil:
		return outcomeUnknown(ctx, resource, "commit", err)
	case wid == id:
		return nil
	case fence.Token(tok) < c.Token:
		return notApplied(ctx, resource, "commit", err)
	case fence.Token(tok) > c.Token:
		return fence.WrapContext(ctx, fmt.Errorf("%w (this write's COMMIT reply was lost: %w)",
			&fence.StaleError{Resource: resource, Presented: c.Token, Highest: fence.Token(tok), Overtaken: true}, err))
	}
	return outcomeUnknown(ctx, resource, "commit", err)
}

// FenceTx fences a transaction the caller opened (directly or through an
// ORM) under the claim ctx carries: one statement; tx's settings are left
// as they are. After any error except the input errors, tx has been
// rolled back. The caller commits; if its COMMIT's reply is lost, compare
// Mark with the claim before assuming either outcome.
func (g *Guard) FenceTx(ctx context.Context, tx *sql.Tx, resource string) error {
	return g.args.Claimed(ctx, resource, nil, func(c fence.Claim) error { return g.fenceTxChecked(ctx, tx, resource, c) })
}

func (g *Guard) fenceTxChecked(ctx context.Context, tx *sql.Tx, resource string, c fence.Claim) (err error) {
	ctx, span := g.rec.Start(ctx, resource, c)
	defer func() { span.End(err) }()
	if tx == nil {
		return fmt.Errorf("mysqlguard: FenceTx with nil tx: %w", fence.ErrNilArgument)
	}
	return g.fence(ctx, tx, resource, c, engine.NewWriteID())
}

// fence runs the fence statement in tx and decides; on refusal or error tx
// is rolled back.
func (g *Guard) fence(ctx context.Context, tx *sql.Tx, resource string, c fence.Claim, id string) error {
	err := g.fenceOnce(ctx, tx, resource, c, id)
	if err != nil {
		rollback(tx)
	}
	g.rec.Decision(ctx, err)
	return fence.WrapContext(ctx, err)
}

func (g *Guard) fenceOnce(ctx context.Context, tx *sql.Tx, resource string, c fence.Claim, id string) error {
	res, err := tx.ExecContext(ctx, g.fenceSQL, resource, int64(c.Token), c.Run, id)
	if err != nil {
		return stmtError(ctx, g.table, resource, "fence", err)
	}
	li, err := res.LastInsertId()
	if err != nil {
		return stmtError(ctx, g.table, resource, "fence", err)
	}
	switch {
	case li >= 0:
		return nil
	case li == corruptInsertID:
		return g.corrupt(ctx, tx, resource)
	}
	mark := fence.Token(-li)
	if mark > c.Token {
		return &fence.StaleError{Resource: resource, Presented: c.Token, Highest: mark}
	}
	// The token equals the mark: read the mark's run (the row is locked by
	// the fence statement) to name it in the reuse error.
	var (
		tok int64
		run string
	)
	if err := tx.QueryRowContext(ctx, g.runSQL, resource).Scan(&tok, &run); err != nil {
		return stmtError(ctx, g.table, resource, "read mark", err)
	}
	if err := (fence.Claim{Token: fence.Token(tok), Run: run}).Validate(); err != nil {
		return &fence.ForeignError{Source: "mysqlguard", Resource: resource, Reason: fmt.Sprintf("token %d, run %q", tok, run)}
	}
	if derr := fence.DecideClaim(resource, c, fence.Token(tok), run); derr != nil {
		return derr
	}
	return &fence.ForeignError{Source: "mysqlguard", Resource: resource, Reason: fmt.Sprintf("fence statement refused token %d, mark (%d, %q) admits it", c.Token, tok, run)}
}

// corrupt reads a mark the fence statement found invalid, for the error.
func (g *Guard) corrupt(ctx context.Context, tx *sql.Tx, resource string) error {
	var (
		tok int64
		run string
	)
	if err := tx.QueryRowContext(ctx, g.runSQL, resource).Scan(&tok, &run); err != nil {
		return stmtError(ctx, g.table, resource, "read mark", err)
	}
	return &fence.ForeignError{Source: "mysqlguard", Resource: resource, Reason: fmt.Sprintf("token %d, run %q", tok, run)}
}

// TxFromContext returns the transaction of a running Fence write callback.
func TxFromContext(ctx context.Context) (*sql.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(*sql.Tx)
	return tx, ok
}

type txKey struct{}

// Fence implements fence.Guard on Config.DB: it begins a transaction,
// fences it under token (with the run ctx carries for that token,
// fence.ClaimFor), runs write with a ctx from which TxFromContext returns
// the transaction, and commits when write returns nil (rolls back
// otherwise); write writes through it (fence.Stage there returns
// fence.ErrNoStager). Errors are InTx's.
func (g *Guard) Fence(ctx context.Context, resource string, token fence.Token, write func(ctx context.Context) error) error {
	c, err := g.args.Token(ctx, resource, token)
	if err != nil {
		return err
	}
	if write == nil {
		return g.args.NilArgument(resource, "Fence with nil write")
	}
	return g.inTx(ctx, resource, c, func(ctx context.Context, tx *sql.Tx) error {
		return write(context.WithValue(fence.WithClaim(ctx, c), txKey{}, tx))
	})
}

// Mark returns resource's mark, read on Config.DB: the token and run
// identity of the last admitted write that committed. A resource without
// a mark (never written) has the zero Claim, as in every guard.
func (g *Guard) Mark(ctx context.Context, resource string) (fence.Claim, error) {
	if err := g.args.Read(ctx, resource); err != nil {
		return fence.Claim{}, err
	}
	var (
		tok int64
		run string
	)
	err := g.db.QueryRowContext(ctx, g.markSQL, resource).Scan(&tok, &run)
	if errors.Is(err, sql.ErrNoRows) {
		return fence.Claim{}, nil
	}
	if err != nil {
		return fence.Claim{}, dbError(ctx, g.table, resource, "read mark", err)
	}
	c := fence.Claim{Token: fence.Token(tok), Run: run}
	if err := c.Validate(); err != nil {
		return fence.Claim{}, &fence.ForeignError{Source: "mysqlguard", Resource: resource, Reason: err.Error()}
	}
	return c, nil
}

// rollback rolls tx back. database/sql's Rollback takes no context: when
// the connection is stuck, it returns once database/sql closes it.
func rollback(tx *sql.Tx) { _ = tx.Rollback() }
