// Package floorcheck calls the lease schema's token floor check function
// (fencekit_check_floor, lease migration 0008) and reads the PostgreSQL
// guard's marks as a floor source. Package lease runs it automatically
// (Config.Floor) and package leaseops exposes it to operators
// (leaseops.CheckFloor); both share this one implementation.
package floorcheck

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencekit/fencekit/sql/migrations"
)

// Queryer is what a check needs: *pgxpool.Pool, *pgx.Conn and pgx.Tx
// implement it.
type Queryer interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Result is what fencekit_check_floor returned.
type Result struct {
	Next         int64  // the sequence's next value after the call
	Stored       int64  // the stored floor after the call
	Node         string // the node recorded as checked (the node it ran on)
	Before       string // the node recorded before the call ("" if none)
	AdvancedFrom int64  // the next value before the call moved the sequence; 0 if it did not
}

// Statement is the check for the quoted lease schema qSchema; $1 is the
// source floor, $2 the node change gap.
func Statement(qSchema string) string {
	return `SELECT next_token, stored_floor, checked_node_now, coalesce(checked_node_before, ''), coalesce(advanced_from, 0)
  FROM ` + qSchema + `.fencekit_check_floor($1::bigint, $2::bigint)`
}

// MarksStatement reads the highest token of the guard marks table in the
// quoted schema qSchema (what pgguard.Marks.Highest reads).
func MarksStatement(qSchema string) string {
	return `SELECT coalesce(max(highest_token), 0) FROM ` + qSchema + `.fencekit_guard_marks`
}

// Run calls the check (stmt from Statement) with the source floor and the
// node change gap.
func Run(ctx context.Context, db Queryer, stmt string, floor, gap int64) (Result, error) {
	var r Result
	err := db.QueryRow(ctx, stmt, floor, gap).Scan(&r.Next, &r.Stored, &r.Node, &r.Before, &r.AdvancedFrom)
	return r, err
}

// Explain turns the errors a schema or role set up wrongly produces into
// messages that say what to do; other errors come back unchanged.
func Explain(err error, schema string) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return err
	}
	switch {
	case pe.Code == "42883" || migrations.IsUndefinedTable(err) || pe.Code == "3F000":
		return fmt.Errorf("schema %s lacks the token floor check function (apply migrations.Migrate with set migrations.Lease, version 8): %w", schema, err)
	case pe.Code == "42501":
		return fmt.Errorf("the role may not run the token floor check (GRANT EXECUTE ON FUNCTION %s.fencekit_check_floor(bigint, bigint) TO the application role; docs/operations.md): %w", schema, err)
	}
	return err
}
