package mysqlguard

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"

	"github.com/fencekit/fencekit/fence"
)

// ErrKeyArity is matched by the error of an in-row write whose key or value
// count does not match RowsConfig.
var ErrKeyArity = errors.New("mysqlguard: wrong number of key or column values")

// ErrTableMismatch is matched by a *TableError: the guarded table (the
// marks table, or an in-row table) is missing or lacks a column the guard
// uses.
var ErrTableMismatch = errors.New("mysqlguard: table missing or without the guard's columns")

// TableError is the error of CheckTable for a table that is missing or
// lacks a column the guard uses. It matches ErrTableMismatch and unwraps
// to the server's error.
type TableError struct {
	Table string
	Err   error // the server's error (1146: no such table, 1054: no such column)
}

// Error implements error.
func (e *TableError) Error() string {
	return fmt.Sprintf("mysqlguard: table %s missing or without the guard's columns: %v", e.Table, e.Err)
}

// Is reports whether target is ErrTableMismatch.
func (e *TableError) Is(target error) bool { return target == ErrTableMismatch }

// Unwrap returns Err.
func (e *TableError) Unwrap() error { return e.Err }

// checkTable runs probe (a SELECT of every column the guard uses, matching
// no row) on q: a missing table or column is a *TableError.
func checkTable(ctx context.Context, q Querier, table, probe string) error {
	if ctx == nil {
		return fmt.Errorf("mysqlguard: CheckTable with nil ctx: %w", fence.ErrNilArgument)
	}
	if q == nil {
		return fmt.Errorf("mysqlguard: CheckTable with nil querier: %w", fence.ErrNilArgument)
	}
	var one int
	err := q.QueryRowContext(ctx, probe).Scan(&one)
	var me *mysql.MySQLError
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case errors.As(err, &me) && (me.Number == 1146 || me.Number == 1054):
		return &TableError{Table: table, Err: err}
	case err != nil:
		return fence.WrapContext(ctx, fmt.Errorf("mysqlguard: check table %s: %w", table, err))
	}
	return nil
}

// busyCodes are the server errors after which retrying the transaction is
// the right answer.
var busyCodes = map[uint16]string{
	1213: "deadlock",
	1205: "lock wait timeout",
}

// dbError maps a database error of operation op. Once ctx has ended, the
// error matches ctx.Err() and context.Cause(ctx) and never fence.ErrBusy.
func dbError(ctx context.Context, table, resource, op string, err error) error {
	if fence.ContextError(ctx) != nil {
		return fence.WrapContext(ctx, fmt.Errorf("mysqlguard: %s %q: %w", op, resource, err))
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		if what, ok := busyCodes[me.Number]; ok {
			return fmt.Errorf("mysqlguard: %s %q: %s: %w: %w", op, resource, what, fence.ErrBusy, err)
		}
		if me.Number == 1146 || me.Number == 1054 {
			return fmt.Errorf("mysqlguard: %s %q: %w", op, resource, &TableError{Table: table, Err: err})
		}
	}
	return fmt.Errorf("mysqlguard: %s %q: %w", op, resource, err)
}

// maybeSent reports whether a failed request may have reached the server:
// false for the server's own error replies and for errors the driver
// reports before sending anything.
func maybeSent(err error) bool {
	var me *mysql.MySQLError
	switch {
	case errors.As(err, &me):
		return false
	case errors.Is(err, driver.ErrBadConn), errors.Is(err, sql.ErrTxDone), errors.Is(err, sql.ErrConnDone):
		return false
	}
	return true
}

// notApplied returns the *fence.NotAppliedError of request op (commit),
// sent, failed with err without a reply, and settled as not applied.
func notApplied(ctx context.Context, resource, op string, err error) error {
	return &fence.NotAppliedError{Op: "mysqlguard: " + op, Resource: resource, Err: fence.WrapContext(ctx, err)}
}

// stmtError maps the error of a statement that cannot commit anything by
// itself (the fence statement, the in-row upsert inside a transaction, a
// read of the mark). When its reply was lost while ctx is live (the
// driver's readTimeout expired: a row-lock wait longer than it, or the
// network), the driver has closed the connection, so the transaction is
// gone and nothing it wrote can commit: the error matches fence.ErrBusy.
func stmtError(ctx context.Context, table, resource, op string, err error) error {
	if fence.ContextError(ctx) == nil && errors.Is(err, mysql.ErrInvalidConn) {
		return fmt.Errorf("mysqlguard: %s %q: reply lost (a row-lock wait longer than the driver's readTimeout, or the network); the transaction is gone, nothing committed: %w: %w",
			op, resource, fence.ErrBusy, err)
	}
	return dbError(ctx, table, resource, op, err)
}

// outcomeUnknown returns the *fence.OutcomeUnknownError of request op
// (commit, upsert), sent and failed with err without a reply.
func outcomeUnknown(ctx context.Context, resource, op string, err error) error {
	return fence.OutcomeUnknown(ctx, "mysqlguard: "+op, resource, err)
}

// configErr is the *fence.ConfigError of a mysqlguard Config field.
func configErr(field, reason string, err error) error {
	return &fence.ConfigError{Source: "mysqlguard", Field: field, Reason: reason, Err: err}
}
