package pgerr_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/internal/pgerr"
)

// otherDriverError stands for another driver's error type: only the
// SQLState method is common.
type otherDriverError struct{ code string }

func (e otherDriverError) Error() string    { return "other driver: " + e.code }
func (e otherDriverError) SQLState() string { return e.code }

type verdict struct{ busy, transient, undefined bool }

// table is the classification every fencekit package relies on; each row
// is checked on errors the server really raised (TestClassifyServerErrors)
// and on constructed ones (TestClassifyWrapped).
var table = map[string]verdict{
	"40001": {busy: true},
	"40P01": {busy: true},
	"55P03": {busy: true},
	"25006": {transient: true},
	"57P01": {transient: true},
	"57P02": {transient: true},
	"57P03": {transient: true},
	"08000": {transient: true},
	"08006": {transient: true},
	"08P01": {transient: true},
	"42P01": {undefined: true},
	"42703": {undefined: true},
	"42883": {undefined: true},
	"57014": {},
	"42501": {},
	"3F000": {},
	"23505": {},
	"22012": {},
	"XX000": {},
	"FK001": {},
}

func check(t *testing.T, what string, err error, code string, want verdict) {
	t.Helper()
	if got := pgerr.Code(err); got != code {
		t.Errorf("%s: Code = %q, want %q", what, got, code)
	}
	if got := pgerr.Busy(err); got != want.busy {
		t.Errorf("%s: Busy = %v, want %v", what, got, want.busy)
	}
	if reason, ok := pgerr.BusyReason(err); ok != want.busy || ok == (reason == "") {
		t.Errorf("%s: BusyReason = %q, %v; want busy %v with a reason", what, reason, ok, want.busy)
	}
	if got := pgerr.Transient(err); got != want.transient {
		t.Errorf("%s: Transient = %v, want %v", what, got, want.transient)
	}
	if got := pgerr.Undefined(err); got != want.undefined {
		t.Errorf("%s: Undefined = %v, want %v", what, got, want.undefined)
	}
	if !pgerr.Is(err, "00000", code) || pgerr.Is(err, "00000") {
		t.Errorf("%s: Is does not match exactly its own code", what)
	}
	if !pgerr.HasClass(err, code[:2]) || pgerr.HasClass(err, "00") {
		t.Errorf("%s: HasClass does not match exactly its own class", what)
	}
}

func TestClassifyWrapped(t *testing.T) {
	for code, want := range table {
		check(t, "PgError "+code, &pgconn.PgError{Code: code}, code, want)
		check(t, "wrapped "+code, fmt.Errorf("op: %w", fmt.Errorf("inner: %w", &pgconn.PgError{Code: code})), code, want)
		check(t, "joined "+code, errors.Join(errors.New("first"), otherDriverError{code}), code, want)
	}
}

func TestNoSQLState(t *testing.T) {
	for _, err := range []error{nil, errors.New("plain"), context.Canceled, fmt.Errorf("x: %w", context.DeadlineExceeded), pgconn.ErrConnClosed} {
		if pgerr.Code(err) != "" || pgerr.Busy(err) || pgerr.Transient(err) || pgerr.Undefined(err) ||
			pgerr.Is(err, "") || pgerr.HasClass(err, "") {
			t.Errorf("%v: classified although it carries no SQLSTATE", err)
		}
	}
}

func TestClass(t *testing.T) {
	for code, want := range map[string]string{"08006": "08", "57P01": "57", "X": "", "": ""} {
		if got := pgerr.Class(code); got != want {
			t.Errorf("Class(%q) = %q, want %q", code, got, want)
		}
	}
}

// TestClassifyServerErrors has the server raise every code of the table
// and classifies what pgx returns, plus the real errors of a missing table,
// column and function.
func TestClassifyServerErrors(t *testing.T) {
	pool := fencetest.Pool(t)
	ctx := context.Background()
	for code, want := range table {
		_, err := pool.Exec(ctx, `DO $$ BEGIN RAISE EXCEPTION 'raised' USING ERRCODE = '`+code+`'; END $$`)
		if err == nil {
			t.Fatalf("RAISE %s: no error", code)
		}
		check(t, "server "+code, fmt.Errorf("op: %w", err), code, want)
	}
	for stmt, code := range map[string]string{
		`SELECT * FROM pgerr_no_such_table`:      "42P01",
		`SELECT no_such_column FROM pg_class`:    "42703",
		`SELECT pgerr_no_such_function(1)`:       "42883",
		`SELECT 1/0`:                             "22012",
		`SELECT * FROM pgerr_no_such_schema.tbl`: "42P01",
	} {
		_, err := pool.Exec(ctx, stmt)
		check(t, stmt, err, code, table[code])
	}
}
