package lease

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/fencekit/fencekit/fence"
)

// Sentinel errors. Match them with errors.Is; the typed errors below carry
// details and match the corresponding sentinel.
var (
	// ErrInvalidKey is matched by every *KeyError.
	ErrInvalidKey = errors.New("lease: invalid key")
	// ErrInvalidRunID is returned, before anything is sent, when a run_id
	// argument (Release, Renew, Resume, Revoke) is uuid.Nil. It matches
	// fence.ErrInvalidRun.
	ErrInvalidRunID = fmt.Errorf("lease: invalid run_id (zero UUID): %w", fence.ErrInvalidRun)
	// ErrUnauthorized wraps the Authorizer's refusal. No statement was sent.
	ErrUnauthorized = errors.New("lease: unauthorized")
	// ErrHeld is matched by *HeldError: another run holds an unexpired lease.
	ErrHeld = errors.New("lease: held by another run")
	// ErrLost means the database refused to renew the lease: it expired or
	// another run took it over. It is the context cause of a lost lease.
	ErrLost = errors.New("lease: lost (renewal rejected)")
	// ErrTrustExpired is the context cause when the local trust deadline
	// (sent_at + TTL − SafetyMargin, monotonic clock) passed without a
	// successful renewal — for instance because the database is unreachable.
	ErrTrustExpired = errors.New("lease: trust deadline passed without renewal")
	// ErrTakenOver is the context cause when another run took the key over
	// with Manager.Takeover while this run held it. The old run's renewals
	// are refused (ErrLost) and its release reports ReleaseNotHolder.
	ErrTakenOver = errors.New("lease: taken over by another run")
	// ErrReleased is the context cause after the holder released the lease.
	ErrReleased = errors.New("lease: released")
	// ErrParked is the context cause after Lease.Park: the grant left this
	// process and waits in the database for Manager.Resume. Like
	// ErrReleased it is the holder's own choice, not a loss.
	ErrParked = errors.New("lease: parked")
	// ErrRunActive is returned by Manager.Resume when the run holds its key
	// but is not parked: a Manager (this one or another) has it active
	// now, for instance for a concurrent call of the same run on another
	// replica. Nothing changed; wait and retry, or share the Lease of this
	// Manager that holds it.
	ErrRunActive = errors.New("lease: run active in a Manager (not parked)")
	// ErrClosed is returned by a closed Manager and is the context cause of
	// the leases it held when Close ran.
	ErrClosed = errors.New("lease: manager closed")
)

// configErr is the *fence.ConfigError (fence.ErrInvalidConfig) of an
// invalid Config field, or of an invalid duration argument (Lease.Park's
// idle bound: field "idle").
func configErr(field, reason string, err error) error {
	return &fence.ConfigError{Source: "lease", Field: field, Reason: reason, Err: err}
}

// KeyError describes an invalid Key field. It matches ErrInvalidKey.
type KeyError struct {
	Field  string // "AccountID" or "SessionID"
	Reason string
}

func (e *KeyError) Error() string {
	return fmt.Sprintf("lease: invalid key %s: %s", e.Field, e.Reason)
}

// Is reports whether target is ErrInvalidKey.
func (e *KeyError) Is(target error) bool { return target == ErrInvalidKey }

// HeldError reports the holder of an unexpired lease. It matches ErrHeld.
// RunID and Token are zero when the holder's row could not be read (a row
// committed concurrently with the acquire statement and already gone from
// view, which is rare); ExpiresAt and Remaining are then zero as well.
type HeldError struct {
	Key       Key
	RunID     uuid.UUID
	Token     fence.Token
	ExpiresAt time.Time     // database time
	Remaining time.Duration // ExpiresAt minus the database's now, as seen by the statement
	Holder    string        // the holder's label (WithHolder), "" when none

	contended bool // the row already asks its release to NOTIFY (migration 0003)
}

func (e *HeldError) Error() string {
	if e.RunID == uuid.Nil {
		return fmt.Sprintf("lease: %s held by another run", e.Key)
	}
	if e.Holder != "" {
		return fmt.Sprintf("lease: %s held by %q, run %s (token %d) for %s more", e.Key, e.Holder, e.RunID, e.Token, e.Remaining.Round(time.Millisecond))
	}
	return fmt.Sprintf("lease: %s held by run %s (token %d) for %s more", e.Key, e.RunID, e.Token, e.Remaining.Round(time.Millisecond))
}

// Is reports whether target is ErrHeld.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }
