// Package floorcheck is the one implementation of the token floor check
// (fencekit_check_floor, lease migration 0008) and of reading the floor
// sources, shared by the automatic path (package lease, Config.Floor) and
// the manual one (leaseops.CheckFloor): both validate the same source
// configuration with Validate, read it with Sources.Read and run the
// check with Check.
package floorcheck

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/sql/migrations"
)

// Queryer is what a check needs: *pgxpool.Pool, *pgx.Conn and pgx.Tx
// implement it.
type Queryer interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Sources are the floor sources of a lease.FloorConfig; the floor is their
// largest value.
type Sources struct {
	Marks       *pgxpool.Pool // the PostgreSQL guard's marks, or nil
	MarksSchema string        // validated (Validate), "" for the default
	Source      func(ctx context.Context) (fence.Token, error)
}

// Configured reports whether any source is set.
func (s Sources) Configured() bool { return s.Marks != nil || s.Source != nil }

// Problem names a misconfigured field of a lease.FloorConfig and why.
type Problem struct {
	Field  string // "Marks", "MarksSchema" or "Gap"
	Reason string
	Err    error // underlying cause, if any
}

// Validate checks s and gap as lease.New and leaseops.CheckFloor do; db,
// when it is a pool, must not be the marks' database. It returns the
// marks schema to use (the default filled in) or the first problem.
func Validate(s Sources, gap fence.Token, db any) (string, *Problem) {
	if gap < 0 {
		return "", &Problem{Field: "Gap", Reason: fmt.Sprintf("negative: %d", gap)}
	}
	if gap > 0 && !s.Configured() {
		return "", &Problem{Field: "Gap", Reason: "set without a floor source (Marks or Source)"}
	}
	if s.Marks == nil {
		if s.MarksSchema != "" {
			return "", &Problem{Field: "MarksSchema", Reason: "set without Marks"}
		}
		return "", nil
	}
	if p, ok := db.(*pgxpool.Pool); ok && p != nil && (p == s.Marks || sameDatabase(p.Config(), s.Marks.Config())) {
		return "", &Problem{Field: "Marks", Reason: "is the lease database: the marks must live in a database that survives the lease database's failover or restore"}
	}
	schema := s.MarksSchema
	if schema == "" {
		schema = migrations.DefaultSchema
	}
	if err := migrations.ValidateIdentifier(schema); err != nil {
		return "", &Problem{Field: "MarksSchema", Reason: err.Error(), Err: err}
	}
	return schema, nil
}

// sameDatabase reports whether two pools' first hosts, ports and database
// names are equal (fallback hosts are not compared).
func sameDatabase(a, b *pgxpool.Config) bool {
	ca, cb := a.ConnConfig, b.ConnConfig
	return ca.Host == cb.Host && ca.Port == cb.Port && ca.Database == cb.Database
}

// Read reads every configured source, each bounded by timeout when it is
// positive, and returns the largest value. A source that fails or returns
// a negative value fails the whole: a floor that could not be read is
// never taken as 0. s.MarksSchema must have passed Validate.
func (s Sources) Read(ctx context.Context, timeout time.Duration) (fence.Token, error) {
	var floor fence.Token
	if s.Marks != nil {
		h, err := s.readMarks(ctx, timeout)
		if err != nil {
			return 0, err
		}
		floor = max(floor, h)
	}
	if s.Source != nil {
		t, err := s.readSource(ctx, timeout)
		if err != nil {
			return 0, err
		}
		floor = max(floor, t)
	}
	return floor, nil
}

func (s Sources) readMarks(ctx context.Context, timeout time.Duration) (fence.Token, error) {
	schema := s.MarksSchema
	if schema == "" {
		schema = migrations.DefaultSchema
	}
	q, err := migrations.QuoteIdentifier(schema)
	if err != nil {
		return 0, fmt.Errorf("guard marks: %w", err)
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var h int64
	err = s.Marks.QueryRow(ctx, `SELECT coalesce(max(highest_token), 0) FROM `+q+`.fencekit_guard_marks`).Scan(&h)
	if err != nil {
		if migrations.IsUndefinedTable(err) {
			return 0, fmt.Errorf("guard marks in schema %s: no fencekit_guard_marks table (migrations.Guard): %w", schema, err)
		}
		return 0, fmt.Errorf("guard marks in schema %s: %w", schema, err)
	}
	return fence.Token(h), nil
}

func (s Sources) readSource(ctx context.Context, timeout time.Duration) (fence.Token, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	t, err := s.Source(ctx)
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
	Node         string // the node recorded as checked (the node it ran on)
	Before       string // the node recorded before the call ("" if none)
	AdvancedFrom int64  // the next value before the call moved the sequence; 0 if it did not
}

// attempts bounds the tries of a check aborted for concurrency (a
// concurrent check raised the floor, SQLSTATE 40001; a deadlock; a lock
// timeout).
const attempts = 3

// Check runs fencekit_check_floor of the lease schema (valid, unquoted)
// with the source floor and the node change gap, each attempt bounded by
// timeout when it is positive, and explains the errors of a schema or role
// set up wrongly.
func Check(ctx context.Context, db Queryer, schema string, floor, gap fence.Token, timeout time.Duration) (Result, error) {
	q, err := migrations.QuoteIdentifier(schema)
	if err != nil {
		return Result{}, err
	}
	stmt := `SELECT next_token, stored_floor, checked_node_now, coalesce(checked_node_before, ''), coalesce(advanced_from, 0)
  FROM ` + q + `.fencekit_check_floor($1::bigint, $2::bigint)`
	var r Result
	for attempt := 1; ; attempt++ {
		r, err = checkOnce(ctx, db, stmt, floor, gap, timeout)
		if err == nil || attempt == attempts || !concurrencyAbort(err) {
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
	err := db.QueryRow(ctx, stmt, int64(floor), int64(gap)).Scan(&r.Next, &r.Stored, &r.Node, &r.Before, &r.AdvancedFrom)
	return r, err
}

func concurrencyAbort(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01" || pe.Code == "55P03")
}

// explain turns the errors a schema or role set up wrongly produces into
// messages that say what to do; other errors come back unchanged.
func explain(err error, schema string) error {
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
