package fence

import (
	"errors"
	"fmt"
)

// ErrStale is matched (errors.Is) by a *StaleError: the presented token is
// lower than one the resource has already accepted.
var ErrStale = errors.New("fence: stale token")

// ErrBusy means the resource could not decide now (a lock wait timed out, a
// concurrent conditional write won a race that is worth retrying). The write
// did not happen; retrying with the same token is safe.
var ErrBusy = errors.New("fence: resource busy, retry")

// ErrInvalidResource is matched by errors about malformed resource names.
var ErrInvalidResource = errors.New("fence: invalid resource name")

// StaleError is returned when a write presents a token below the resource's
// high-water mark. It matches ErrStale.
type StaleError struct {
	Resource  string // the resource name as given to the guard
	Presented Token  // the token the refused write carried
	Highest   Token  // the highest token the resource had accepted
}

// Error implements error.
func (e *StaleError) Error() string {
	return fmt.Sprintf("fence: stale token %d for %q: resource has accepted %d", e.Presented, e.Resource, e.Highest)
}

// Is reports whether target is ErrStale.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// IsStale reports whether err is, or wraps, a stale-token refusal, and returns
// it.
func IsStale(err error) (*StaleError, bool) {
	var se *StaleError
	ok := errors.As(err, &se)
	return se, ok
}
