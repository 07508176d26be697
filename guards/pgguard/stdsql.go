package pgguard

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/internal/engine"
)

// InSQLTx is InTx for database/sql: it begins a transaction on
// Config.SQLDB (isolation Config.IsoLevel), runs the same single fence
// statement (lock wait bounded by Config.LockTimeout), calls fn with ctx and
// the transaction, and commits. database/sql sends BEGIN on its own, so
// this is one round trip more than InTx. Errors and rollback are InTx's; a
// *fence.ConfigError when Config.SQLDB is nil, before any I/O.
func (g *Guard) InSQLTx(ctx context.Context, resource string, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return g.args.Claimed(ctx, resource, nil, func(c fence.Claim) error { return g.inSQLTxChecked(ctx, resource, c, fn) })
}

func (g *Guard) inSQLTxChecked(ctx context.Context, resource string, c fence.Claim, fn func(ctx context.Context, tx *sql.Tx) error) (err error) {
	ctx, span := g.met.Start(ctx, resource, c)
	defer func() { span.End(err) }()
	if fn == nil {
		return fmt.Errorf("pgguard: InSQLTx with nil fn: %w", fence.ErrNilArgument)
	}
	if g.sqlDB == nil {
		return configErr("SQLDB", "nil: InSQLTx needs a database/sql database (this Guard has only DB)", nil)
	}
	return g.inSQLTx(ctx, resource, c, fn)
}

// inSQLTx begins on g.sqlDB, fences, runs fn and commits.
func (g *Guard) inSQLTx(ctx context.Context, resource string, c fence.Claim, fn func(ctx context.Context, tx *sql.Tx) error) error {
	tx, err := g.sqlDB.BeginTx(ctx, &sql.TxOptions{Isolation: g.sqlIso})
	if err != nil {
		return g.dbError(ctx, resource, "begin", err)
	}
	defer sqlRollback(tx) // no-op (sql.ErrTxDone) after Commit
	if err := g.fenceStd(ctx, tx, resource, c, g.lockArg); err != nil {
		return err
	}
	if err := fn(engine.WithoutStager(ctx), tx); err != nil {
		return fence.WrapContext(ctx, err)
	}
	if err := fence.ContextError(ctx); err != nil {
		// database/sql would refuse the COMMIT with ctx's plain error,
		// which a COMMIT cancelled in flight returns as well: decide here.
		return fmt.Errorf("pgguard: %q: not committed: %w", resource, err)
	}
	if err := tx.Commit(); err != nil {
		return commitError(ctx, g.schema, MarksTable, resource, "commit", err)
	}
	return nil
}

// FenceSQLTx is FenceTx for a database/sql transaction the caller opened
// (directly or through an ORM): one statement, under the claim ctx
// carries; tx's settings are left as they are. After any error except the
// input errors, tx has been rolled back.
func (g *Guard) FenceSQLTx(ctx context.Context, tx *sql.Tx, resource string) error {
	return g.args.Claimed(ctx, resource, nil, func(c fence.Claim) error { return g.fenceSQLTxChecked(ctx, tx, resource, c) })
}

func (g *Guard) fenceSQLTxChecked(ctx context.Context, tx *sql.Tx, resource string, c fence.Claim) (err error) {
	ctx, span := g.met.Start(ctx, resource, c)
	defer func() { span.End(err) }()
	if tx == nil {
		return fmt.Errorf("pgguard: FenceSQLTx with nil tx: %w", fence.ErrNilArgument)
	}
	err = g.fenceStd(ctx, tx, resource, c, nil)
	if err != nil {
		sqlRollback(tx)
	}
	return err
}

// fenceStd runs the fence statement in tx; lockArg as in fenceTx.
func (g *Guard) fenceStd(ctx context.Context, tx *sql.Tx, resource string, c fence.Claim, lockArg any) error {
	var (
		mark int64
		run  string
	)
	if err := tx.QueryRowContext(ctx, g.fenceSQL, resource, int64(c.Token), c.Run, lockArg).Scan(&mark, &run); err != nil {
		return g.dbError(ctx, resource, "fence", err)
	}
	return fence.WrapContext(ctx, g.decide(ctx, resource, c, mark, run))
}

// sqlRollback rolls tx back. database/sql's Rollback takes no context: when
// the driver's connection is stuck, it returns once database/sql closes it.
func sqlRollback(tx *sql.Tx) { _ = tx.Rollback() }

type sqlTxKey struct{}

// SQLTxFromContext returns the database/sql transaction of the Guard.Fence
// call whose write function received ctx (a Guard with Config.SQLDB and no
// Config.DB).
func SQLTxFromContext(ctx context.Context) (*sql.Tx, bool) {
	tx, ok := ctx.Value(sqlTxKey{}).(*sql.Tx)
	return tx, ok
}
