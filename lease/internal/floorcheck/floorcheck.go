// Package floorcheck is the one implementation of the token floor check
// (fencekit_check_floor, lease migrations 0008 and 0010) and of reading a
// floor source, shared by the automatic path (package lease, Config.Floor)
// and the operator's (leaseops.CheckFloor, which advances, and
// leaseops.TokenFloor.Check, which does not): they validate the same
// configuration with Validate, read the source with Read and run the check
// with Check.
package floorcheck

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/pgerr"
	"github.com/fencekit/fencekit/sql/migrations"
)

// Queryer is what a check needs: *pgxpool.Pool, *pgx.Conn and pgx.Tx
// implement it.
type Queryer interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Source is a floor source (lease.FloorSource).
type Source = func(ctx context.Context) (fence.Token, error)

// Problem names a misconfigured field of a lease.FloorConfig and why.
type Problem struct {
	Field  string // "Gap"
	Reason string
}

// Validate checks a floor configuration as lease.New and
// leaseops.CheckFloor do: gap is not negative, and needs a source.
func Validate(src Source, gap fence.Token) *Problem {
	if gap < 0 {
		return &Problem{Field: "Gap", Reason: fmt.Sprintf("negative: %d", gap)}
	}
	if gap > 0 && src == nil {
		return &Problem{Field: "Gap", Reason: "set without a floor source (Source)"}
	}
	return nil
}

// Read calls src, bounded by timeout when it is positive. A source that
// fails or returns a negative value fails: a floor that could not be read
// is never taken as 0.
func Read(ctx context.Context, src Source, timeout time.Duration) (fence.Token, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	t, err := src(ctx)
	if err != nil {
		return 0, fmt.Errorf("floor source: %w", err)
	}
	if t < 0 {
		return 0, fmt.Errorf("floor source: negative floor %d", t)
	}
	return t, nil
}

// Result is what fencekit_check_floor returned.
type Result struct {
	Next         int64  // the sequence's next value after the call
	Stored       int64  // the stored floor after the call
	Node         string // the node it ran on
	Before       string // the node recorded as checked before the call ("" if none)
	AdvancedFrom int64  // the next value before the call moved the sequence; 0 if it did not
	// Checked: Node is recorded as checked and Next is above Stored, so
	// grants on Node are allowed. Always true from a check that advances.
	Checked bool
}

// attempts bounds the tries of a check aborted for concurrency (a
// concurrent check raised the floor, SQLSTATE 40001; a deadlock; a lock
// timeout).
const attempts = 3

// Check runs fencekit_check_floor of the lease schema (valid, unquoted)
// with the source floor and the node change gap, each attempt bounded by
// timeout when it is positive, and explains the errors of a schema or role
// set up wrongly. With advance it moves the sequence past the floor when it
// is behind and records the node (lease migration 0008's two-argument
// function, which the application role may be granted); without, it never
// moves the sequence and records the node only when the sequence is above
// the floor (Result.Checked; migration 0010's three-argument function, the
// one both run). gap needs advance.
func Check(ctx context.Context, db Queryer, schema string, floor, gap fence.Token, advance bool, timeout time.Duration) (Result, error) {
	q, err := migrations.QuoteIdentifier(schema)
	if err != nil {
		return Result{}, err
	}
	stmt := `SELECT next_token, stored_floor, checked_node_now, coalesce(checked_node_before, ''), coalesce(advanced_from, 0), true
  FROM ` + q + `.fencekit_check_floor($1::bigint, $2::bigint)`
	if !advance {
		stmt = `SELECT next_token, stored_floor, node, coalesce(checked_node_before, ''), coalesce(advanced_from, 0), checked
  FROM ` + q + `.fencekit_check_floor($1::bigint, $2::bigint, false)`
	}
	var r Result
	for attempt := 1; ; attempt++ {
		r, err = checkOnce(ctx, db, stmt, floor, gap, timeout)
		if err == nil || attempt == attempts || !pgerr.Busy(err) {
			break
		}
	}
	if err != nil {
		return r, explain(err, schema)
	}
	return r, nil
}

func checkOnce(ctx context.Context, db Queryer, stmt string, floor, gap fence.Token, timeout time.Duration) (Result, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var r Result
	err := db.QueryRow(ctx, stmt, int64(floor), int64(gap)).Scan(&r.Next, &r.Stored, &r.Node, &r.Before, &r.AdvancedFrom, &r.Checked)
	return r, err
}

// explain turns the errors a schema or role set up wrongly produces into
// messages that say what to do; other errors come back unchanged.
func explain(err error, schema string) error {
	switch {
	case pgerr.Is(err, pgerr.UndefinedFunction, pgerr.UndefinedTable, pgerr.InvalidSchemaName):
		return fmt.Errorf("schema %s lacks the token floor check function (apply migrations.Migrate with set migrations.Lease, version 10): %w", schema, err)
	case pgerr.Is(err, pgerr.InsufficientPrivilege):
		return fmt.Errorf("the role may not run the token floor check (GRANT EXECUTE ON FUNCTION %s.fencekit_check_floor(bigint, bigint) TO the application role, (bigint, bigint, boolean) for a check without advance; docs/operations.md): %w", schema, err)
	}
	return err
}
