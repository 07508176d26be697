package demo

import (
	"errors"
	"fmt"
	"strings"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease"
)

// Exit codes of fence-demo, for the scenario and every subcommand.
const (
	// ExitOK: the command did what it was asked; for the scenario, every
	// end-state check held.
	ExitOK = 0
	// ExitFailed: a scenario check failed, or an operation failed for a
	// reason other than fencing (a service unreachable, a database error).
	ExitFailed = 1
	// ExitUsage: the command line is wrong (unknown command or flag, a
	// missing or malformed value such as a token, run id or key).
	ExitUsage = 2
	// ExitRefused: fencekit refused the operation: the lease is held by
	// another run (acquire), no longer this run's (renew, release), the
	// token is stale (put) or the caller is not authorised.
	ExitRefused = 3
)

// ErrUsage is matched by every *UsageError.
var ErrUsage = errors.New("demo: usage")

// UsageError reports a bad command line. It maps to ExitUsage.
type UsageError struct {
	Msg string
}

func (e *UsageError) Error() string { return e.Msg }

// Is reports whether target is ErrUsage.
func (e *UsageError) Is(target error) bool { return target == ErrUsage }

func usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// ErrCheckFailed is matched by every *CheckError.
var ErrCheckFailed = errors.New("demo: end-state check failed")

// CheckError lists the scenario's end-state checks that did not hold. It
// maps to ExitFailed.
type CheckError struct {
	Failed []string // one line per failed check
}

func (e *CheckError) Error() string {
	return fmt.Sprintf("demo: %d check(s) failed: %s", len(e.Failed), strings.Join(e.Failed, "; "))
}

// Is reports whether target is ErrCheckFailed.
func (e *CheckError) Is(target error) bool { return target == ErrCheckFailed }

// ErrNotHolder is matched by the error of a release whose run did not hold
// the lease (it had expired, was never acquired, or another run holds it).
var ErrNotHolder = errors.New("demo: this run does not hold the lease")

// ExitCode maps an error to the documented exit code.
func ExitCode(err error) int {
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, ErrUsage), errors.Is(err, fence.ErrInvalidToken),
		errors.Is(err, lease.ErrInvalidKey), errors.Is(err, lease.ErrInvalidRunID),
		errors.Is(err, fence.ErrInvalidResource):
		return ExitUsage
	case errors.Is(err, lease.ErrHeld), errors.Is(err, lease.ErrLost),
		errors.Is(err, fence.ErrStale), errors.Is(err, lease.ErrUnauthorized),
		errors.Is(err, ErrNotHolder):
		return ExitRefused
	}
	return ExitFailed
}
