//go:build unix

package fileguard

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/fence"
)

// ErrInvalidConfig is matched by every error New returns for a bad Config.
var ErrInvalidConfig = errors.New("fileguard: invalid config")

// ErrUnsafePath is matched by an *UnsafePathError: something on a
// resource's path below Dir (its file, one of its directories, or the
// guard's own lock, temporary or state directory) is a symbolic link, a
// FIFO, a socket or a device. The guard opens nothing through it and
// writes nothing.
var ErrUnsafePath = errors.New("fileguard: unsafe path")

// ForeignError reports a file the guard did not write (no header, or a
// malformed one), or a path where the guard needs a file or a directory
// holding something else. It matches fence.ErrForeign. The guard neither
// reads through it nor overwrites it.
type ForeignError struct {
	Resource string
	Path     string
	Reason   string
}

// Error implements error.
func (e *ForeignError) Error() string {
	return fmt.Sprintf("fileguard: %q: %s is not a fileguard file: %s", e.Resource, e.Path, e.Reason)
}

// Is reports whether target is fence.ErrForeign.
func (e *ForeignError) Is(target error) bool { return target == fence.ErrForeign }

// NotFoundError reports a resource without content. It matches
// fence.ErrNotFound.
type NotFoundError struct {
	Resource string
	// Deleted is true when the file is a tombstone: a fenced Delete, or a
	// Fence that staged nothing over no content.
	Deleted bool
	// Token is the tombstone's token, the resource's mark; zero when the
	// resource has no file.
	Token fence.Token
}

// Error implements error.
func (e *NotFoundError) Error() string {
	if e.Deleted {
		return fmt.Sprintf("fileguard: %q not found: deleted under token %d", e.Resource, e.Token)
	}
	return fmt.Sprintf("fileguard: %q not found", e.Resource)
}

// Is reports whether target is fence.ErrNotFound.
func (e *NotFoundError) Is(target error) bool { return target == fence.ErrNotFound }

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
