package pgguard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/internal/engine"
)

// InTx runs fn in a transaction fenced for resource under the claim ctx
// carries (fence.ClaimFromContext: a lease's context carries its claim). It
// begins a transaction on Config.DB and fences it (see Begin), calls fn with
// ctx and the transaction, and commits. Any error, and a panic in fn, rolls
// the transaction back, so the mark is raised if and only if fn's
// statements commit.
//
// Errors: fence.ErrNoToken when ctx carries no claim, input errors
// (fence.ErrInvalidResource, fence.ErrInvalidToken, fence.ErrInvalidRun,
// fence.ErrInvalidScope, fence.ErrNilArgument), all before any I/O;
// *fence.ScopeError under Config.Strict, before any I/O; a *fence.ConfigError
// when Config.DB is nil, before any I/O; *fence.StaleError and
// *fence.ReusedError from the fence statement; fence.ErrBusy for lock
// timeout, serialization failure and deadlock (retry the transaction);
// fn's error as is. Once ctx has ended every error matches ctx.Err() and
// context.Cause(ctx) (for a lease's context, the reason it was lost) and
// none matches fence.ErrBusy. fn must not commit or roll back the
// transaction, nor use it from other goroutines.
//
// If COMMIT was sent and no answer came back (ctx ended while waiting, the
// connection broke), InTx returns a *fence.OutcomeUnknownError
// (fence.ErrOutcomeUnknown): the transaction may have committed. Read the
// mark or the data back, or retry with the same claim.
func (g *Guard) InTx(ctx context.Context, resource string, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return g.args.Claimed(ctx, resource, nil, func(c fence.Claim) error { return g.inTx(ctx, resource, c, fn) })
}

func (g *Guard) inTx(ctx context.Context, resource string, c fence.Claim, fn func(ctx context.Context, tx pgx.Tx) error) (err error) {
	ctx, span := g.met.Start(ctx, resource, c)
	defer func() { span.End(err) }()
	if fn == nil {
		return fmt.Errorf("pgguard: InTx with nil fn: %w", fence.ErrNilArgument)
	}
	if g.db == nil {
		return g.needDB("InTx")
	}
	tx, err := g.begin(ctx, resource, c)
	if err != nil {
		return err
	}
	return g.runAndCommit(ctx, tx, resource, func() error { return fn(engine.WithoutStager(ctx), tx) })
}

// needDB is the error of a pgx method of a Guard without Config.DB.
func (g *Guard) needDB(method string) error {
	return configErr("DB", "nil: "+method+" needs a pgx database (this Guard has only SQLDB)", nil)
}

// runAndCommit runs fn in the fenced tx and commits; any error or panic
// rolls back. A COMMIT that was sent without a reply coming back (the
// connection broke, or ctx ended while waiting) has an unknown outcome.
func (g *Guard) runAndCommit(ctx context.Context, tx pgx.Tx, resource string, fn func() error) error {
	defer rollback(ctx, tx) // no-op (ErrTxClosed) after Commit
	if err := fn(); err != nil {
		return fence.WrapContext(ctx, err)
	}
	if err := fence.ContextError(ctx); err != nil {
		return fmt.Errorf("pgguard: %q: not committed: %w", resource, err) // the deferred rollback undoes it
	}
	if tx.Conn().IsClosed() {
		return fence.WrapContext(ctx, fmt.Errorf("pgguard: commit %q: the connection closed before COMMIT was sent: not committed: %w", resource, pgconn.ErrConnClosed))
	}
	if err := tx.Commit(ctx); err != nil {
		return commitError(ctx, g.schema, MarksTable, resource, "commit", err)
	}
	return nil
}

// Begin begins a transaction on Config.DB (isolation Config.IsoLevel, lock
// waits bounded by Config.LockTimeout) and fences it for resource under the
// claim ctx carries. When Config.DB implements Batcher (as *pgxpool.Pool and
// *pgx.Conn do), BEGIN and the fence statement travel as one pgx.Batch: one
// round trip. On success the transaction holds the raised mark and its row
// lock until it ends; the caller writes in it and commits or rolls it back.
// Errors are InTx's; on every error no transaction is returned (it was
// rolled back and its connection released).
func (g *Guard) Begin(ctx context.Context, resource string) (pgx.Tx, error) {
	c, err := g.args.Context(ctx, resource)
	if err != nil {
		return nil, err
	}
	return g.beginChecked(ctx, resource, c)
}

func (g *Guard) beginChecked(ctx context.Context, resource string, c fence.Claim) (_ pgx.Tx, err error) {
	ctx, span := g.met.Start(ctx, resource, c)
	defer func() { span.End(err) }()
	if g.db == nil {
		return nil, g.needDB("Begin")
	}
	return g.begin(ctx, resource, c)
}

// begin begins a transaction on g.db and fences it: in one batch when g.db
// is a Batcher, otherwise BeginTx and then the fence statement.
func (g *Guard) begin(ctx context.Context, resource string, c fence.Claim) (pgx.Tx, error) {
	if b, ok := g.db.(Batcher); ok {
		return g.beginBatch(ctx, b, resource, c)
	}
	tx, err := g.db.BeginTx(ctx, pgx.TxOptions{IsoLevel: g.iso})
	if err != nil {
		return nil, g.dbError(ctx, resource, "begin", err)
	}
	if err := g.fenceTx(ctx, tx, resource, c, g.lockArg); err != nil {
		rollback(ctx, tx)
		return nil, err
	}
	return tx, nil
}

func (g *Guard) beginBatch(ctx context.Context, db Batcher, resource string, c fence.Claim) (pgx.Tx, error) {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{IsoLevel: g.iso})
	var (
		mark    int64
		run     string
		scanned bool
	)
	b.Queue(g.fenceSQL, resource, int64(c.Token), c.Run, g.lockArg).QueryRow(func(row pgx.Row) error {
		if err := row.Scan(&mark, &run); err != nil {
			return err
		}
		scanned = true
		return nil
	})
	br := db.SendBatch(ctx, b)
	tx := br.Tx()
	err := br.Close()
	if err == nil && tx == nil {
		err = errors.New("pgguard: SendBatch returned no transaction for a batch begun with Batch.BeginTx")
	}
	switch {
	case err == nil:
		err = fence.WrapContext(ctx, g.decide(ctx, resource, c, mark, run))
	case !scanned:
		err = g.dbError(ctx, resource, "fence", err)
	}
	if err != nil {
		if tx != nil {
			rollback(ctx, tx)
		}
		return nil, err
	}
	return tx, nil
}

// FenceTx enforces the claim ctx carries for resource inside the caller's
// transaction tx, with one statement: if the claim is admitted the mark is
// raised (or created) and FenceTx returns nil; the caller's writes in tx
// and the raised mark then commit or roll back together, and the mark's row
// stays locked until tx ends, so a concurrent holder of the same resource
// waits for tx's outcome. It may run before or after the caller's writes in
// tx. It does not change tx's settings: bound its lock wait with ctx or
// your own lock_timeout.
//
// Errors are InTx's. After any error except the input errors (returned
// before any I/O, tx left as it was) FenceTx has rolled tx back, so work
// done earlier in tx can never be committed without the check. tx must be
// the outermost transaction: rolling back a pgx savepoint transaction does
// not undo its parent's work.
func (g *Guard) FenceTx(ctx context.Context, tx pgx.Tx, resource string) error {
	return g.args.Claimed(ctx, resource, nil, func(c fence.Claim) error { return g.fenceTxChecked(ctx, tx, resource, c) })
}

func (g *Guard) fenceTxChecked(ctx context.Context, tx pgx.Tx, resource string, c fence.Claim) (err error) {
	ctx, span := g.met.Start(ctx, resource, c)
	defer func() { span.End(err) }()
	if tx == nil {
		return fmt.Errorf("pgguard: FenceTx with nil tx: %w", fence.ErrNilArgument)
	}
	err = g.fenceTx(ctx, tx, resource, c, nil)
	if err != nil {
		rollback(ctx, tx)
	}
	return err
}

// fenceTx runs the fence statement in tx; lockArg is the lock bound to set
// (nil: leave tx's settings).
func (g *Guard) fenceTx(ctx context.Context, tx pgx.Tx, resource string, c fence.Claim, lockArg any) error {
	var (
		mark int64
		run  string
	)
	if err := tx.QueryRow(ctx, g.fenceSQL, resource, int64(c.Token), c.Run, lockArg).Scan(&mark, &run); err != nil {
		return g.dbError(ctx, resource, "fence", err)
	}
	return fence.WrapContext(ctx, g.decide(ctx, resource, c, mark, run))
}

func rollback(ctx context.Context, tx pgx.Tx) {
	ctx, cancel := cleanupCtx(ctx)
	defer cancel()
	_ = tx.Rollback(ctx) // the connection dies if this fails; nothing to commit either way
}

type txKey struct{}

// TxFromContext returns the pgx transaction of the Guard.Fence call whose
// write function received ctx (a Guard with Config.DB).
func TxFromContext(ctx context.Context) (pgx.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(pgx.Tx)
	return tx, ok
}

// Fence implements fence.Guard, for code written against that interface
// (httpguard, the conformance kit): it fences under fence.ClaimFor(ctx,
// token) as InTx fences under ctx's claim, calls write with a ctx that carries the
// transaction and the claim (fence.FromContext), and commits. The
// transaction is a pgx.Tx on Config.DB (TxFromContext), or, when the Guard
// has only Config.SQLDB, a *sql.Tx on it (SQLTxFromContext); write
// writes through it (fence.Stage there returns fence.ErrNoStager). Errors
// and rollback are InTx's.
func (g *Guard) Fence(ctx context.Context, resource string, token fence.Token, write func(ctx context.Context) error) (err error) {
	c, err := g.args.Token(ctx, resource, token)
	if err != nil {
		return err
	}
	ctx, span := g.met.Start(ctx, resource, c)
	defer func() { span.End(err) }()
	if write == nil {
		return fmt.Errorf("pgguard: Fence with nil write: %w", fence.ErrNilArgument)
	}
	if g.db == nil {
		return g.inSQLTx(ctx, resource, c, func(ctx context.Context, tx *sql.Tx) error {
			return write(context.WithValue(fence.WithClaim(ctx, c), sqlTxKey{}, tx))
		})
	}
	tx, err := g.begin(ctx, resource, c)
	if err != nil {
		return err
	}
	wctx := context.WithValue(engine.WithoutStager(fence.WithClaim(ctx, c)), txKey{}, tx)
	return g.runAndCommit(ctx, tx, resource, func() error { return write(wctx) })
}

// Mark returns the high-water mark of resource with the run identity
// stored with it (the zero Claim when it has none), read on Config.DB, or
// on Config.SQLDB when DB is nil.
func (g *Guard) Mark(ctx context.Context, resource string) (fence.Claim, error) {
	if err := g.args.Read(ctx, resource); err != nil {
		return fence.Claim{}, err
	}
	var (
		v   int64
		run string
		err error
	)
	if g.db != nil {
		err = g.db.QueryRow(ctx, g.readSQL, resource).Scan(&v, &run)
	} else {
		err = g.sqlDB.QueryRowContext(ctx, g.readSQL, resource).Scan(&v, &run)
	}
	if errors.Is(err, pgx.ErrNoRows) || errors.Is(err, sql.ErrNoRows) {
		return fence.Claim{}, nil
	}
	if err != nil {
		return fence.Claim{}, g.dbError(ctx, resource, "mark", err)
	}
	return fence.Claim{Token: fence.Token(v), Run: run}, nil
}
