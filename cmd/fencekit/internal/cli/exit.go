package cli

import (
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// Exit codes of every fencekit command.
const (
	// ExitOK: the command did what it was asked (also: a revoke of a key
	// nobody holds, a floor status showing grants refused).
	ExitOK = 0
	// ExitFailed: the command failed (database unreachable, statement
	// failed, schema not migrated for validate); the cause is printed.
	ExitFailed = 1
	// ExitUsage: bad command line or input; nothing was sent or changed.
	ExitUsage = 2
	// ExitRefused: refused as unsafe: the floor check failed and grants
	// stay refused.
	ExitRefused = 3
)

// ErrUsage is matched by every *UsageError.
var ErrUsage = errors.New("fencekit: usage")

// UsageError reports a bad command line or input. It maps to ExitUsage.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// Is reports whether target is ErrUsage.
func (e *UsageError) Is(target error) bool { return target == ErrUsage }

func usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// ExitCode maps a command's error to its exit code.
func ExitCode(err error) int {
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, ErrUsage),
		errors.Is(err, migrations.ErrInvalidIdentifier), errors.Is(err, migrations.ErrInvalidVersion),
		errors.Is(err, lease.ErrInvalidKey), errors.Is(err, lease.ErrInvalidRunID),
		errors.Is(err, fence.ErrInvalidConfig), errors.Is(err, lease.ErrInvalidOption),
		errors.Is(err, pgguard.ErrInvalidArgument):
		return ExitUsage
	case errors.Is(err, lease.ErrTokenFloor), errors.Is(err, lease.ErrFailoverUnchecked):
		return ExitRefused
	}
	return ExitFailed
}
