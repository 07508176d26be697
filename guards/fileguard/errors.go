//go:build unix

package fileguard

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/fence"
)

// ErrUnsafePath is matched by an *UnsafePathError: something on a
// resource's path below Dir (its file, one of its directories, or the
// guard's own lock, temporary or state directory) is a symbolic link, a
// FIFO, a socket or a device. The guard opens nothing through it and
// writes nothing.
var ErrUnsafePath = errors.New("fileguard: unsafe path")

// UnsafePathError reports a symbolic link or a special file (FIFO, socket,
// device) found where the guard needs a directory or a regular file below
// Dir. It matches ErrUnsafePath. Nothing was opened through it, nothing
// was written.
type UnsafePathError struct {
	Resource string
	Path     string // what was found
	Reason   string // what it is: "a symbolic link", "a FIFO", ...
}

// Error implements error.
func (e *UnsafePathError) Error() string {
	return fmt.Sprintf("fileguard: %q: refused to open %s: %s", e.Resource, e.Path, e.Reason)
}

// Is reports whether target is ErrUnsafePath.
func (e *UnsafePathError) Is(target error) bool { return target == ErrUnsafePath }

// outcomeUnknown returns the *fence.OutcomeUnknownError of a write renamed
// into place whose directory could not be synced.
func outcomeUnknown(ctx context.Context, resource string, err error) error {
	return fence.OutcomeUnknown(ctx, "fileguard: sync directory", resource, err)
}

// configErr is the *fence.ConfigError of a fileguard Config field.
func configErr(field, reason string, err error) error {
	return &fence.ConfigError{Source: "fileguard", Field: field, Reason: reason, Err: err}
}
