// Package pgerr classifies PostgreSQL errors by SQLSTATE, for every
// fencekit package that talks to PostgreSQL (lease, its floor check and
// pgguard), so that "busy, retry", "transient, retry later" and "object
// missing" mean the same codes everywhere.
//
// An error carries a SQLSTATE when some error in its chain implements
// SQLState() string: *pgconn.PgError does, and so do the errors of other
// PostgreSQL drivers. The classifiers look at the first such error only.
package pgerr

import (
	"errors"
)

// SQLSTATEs named by the classifiers.
const (
	SerializationFailure  = "40001"
	Deadlock              = "40P01"
	LockTimeout           = "55P03" // lock_not_available
	ReadOnlyTransaction   = "25006"
	AdminShutdown         = "57P01"
	CrashShutdown         = "57P02"
	CannotConnectNow      = "57P03"
	QueryCanceled         = "57014"
	UndefinedTable        = "42P01"
	UndefinedColumn       = "42703"
	UndefinedFunction     = "42883"
	InvalidSchemaName     = "3F000"
	InsufficientPrivilege = "42501"
)

// sqlState is implemented by *pgconn.PgError and the errors of other
// PostgreSQL drivers.
type sqlState interface{ SQLState() string }

// Code returns the SQLSTATE of the first error in err's chain that carries
// one, or "" when none does (nil, a network error, a client-side failure).
func Code(err error) string {
	var st sqlState
	if err == nil || !errors.As(err, &st) {
		return ""
	}
	return st.SQLState()
}

// busy names the SQLSTATEs of Busy.
var busy = map[string]string{
	SerializationFailure: "serialization failure",
	Deadlock:             "deadlock",
	LockTimeout:          "lock timeout",
}

// Busy reports whether the database aborted the statement because of
// concurrency: serialization failure (40001), deadlock (40P01) or lock
// timeout (55P03). The statement changed nothing and retrying is the right
// answer.
func Busy(err error) bool {
	_, ok := BusyReason(err)
	return ok
}

// BusyReason is Busy with a short description of the abort for error
// messages ("serialization failure", "deadlock", "lock timeout").
func BusyReason(err error) (string, bool) {
	what, ok := busy[Code(err)]
	return what, ok
}

// transient names the SQLSTATEs of Transient outside class 08.
var transient = map[string]bool{
	ReadOnlyTransaction: true, // a demoted primary during a switchover
	AdminShutdown:       true,
	CrashShutdown:       true,
	CannotConnectNow:    true, // starting up or shutting down
}

// Transient reports whether err is a server error after which the same
// request may succeed once the server is back: read-only transaction
// (25006, a demoted primary during a switchover), shutting down or starting
// up (57P01, 57P02, 57P03), or a connection exception (class 08). It is
// false for errors without a SQLSTATE: whether those are worth retrying is
// the caller's decision.
func Transient(err error) bool {
	code := Code(err)
	return transient[code] || Class(code) == "08"
}

// Undefined reports whether err is the database's refusal of a statement
// because an object it names does not exist: a table (42P01), a column
// (42703) or a function (42883), the sign of a schema not migrated (or not
// to this build's version).
func Undefined(err error) bool {
	switch Code(err) {
	case UndefinedTable, UndefinedColumn, UndefinedFunction:
		return true
	}
	return false
}

// Is reports whether err carries one of codes.
func Is(err error, codes ...string) bool {
	code := Code(err)
	if code == "" {
		return false
	}
	for _, c := range codes {
		if c == code {
			return true
		}
	}
	return false
}

// Class returns the class of a SQLSTATE, its first two characters, or ""
// for a code shorter than that.
func Class(code string) string {
	if len(code) < 2 {
		return ""
	}
	return code[:2]
}

// HasClass reports whether err carries a SQLSTATE of one of classes (two
// characters each, e.g. "08").
func HasClass(err error, classes ...string) bool {
	c := Class(Code(err))
	if c == "" {
		return false
	}
	for _, want := range classes {
		if want == c {
			return true
		}
	}
	return false
}
