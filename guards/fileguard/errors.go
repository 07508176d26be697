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

// ErrCorrupt is matched by a *FileError: the file at a resource's path is
// not one this guard wrote (no header, or a malformed one). The guard
// neither reads through it nor overwrites it.
var ErrCorrupt = errors.New("fileguard: not a fileguard file")

// ErrNotFound is matched by a *NotFoundError: the resource has no content.
// A *NotFoundError matches fence.ErrNotFound too, as every guard's read of a
// missing resource does.
var ErrNotFound = errors.New("fileguard: not found")

// ErrUnsafePath is matched by an *UnsafePathError: something on a
// resource's path below Dir (its file, one of its directories, or the
// guard's own lock, temporary or state directory) is a symbolic link, a
// FIFO, a socket or a device. The guard opens nothing through it and
// writes nothing.
var ErrUnsafePath = errors.New("fileguard: unsafe path")

// ErrNilContext is returned (wrapped, with the resource) by every call
// given a nil context, before any I/O; Stage and StageDelete return
// ErrNoStager for one.
var ErrNilContext = errors.New("fileguard: nil context")

// ResourceError reports a resource name this guard refuses on top of
// fence.ValidateResource. It matches fence.ErrInvalidResource.
type ResourceError struct {
	Resource string
	Reason   string
}

// Error implements error.
func (e *ResourceError) Error() string {
	return fmt.Sprintf("fileguard: invalid resource %q: %s", e.Resource, e.Reason)
}

// Is reports whether target is fence.ErrInvalidResource.
func (e *ResourceError) Is(target error) bool { return target == fence.ErrInvalidResource }

// FileError reports a file the guard did not write. It matches ErrCorrupt.
type FileError struct {
	Resource string
	Path     string
	Reason   string
}

// Error implements error.
func (e *FileError) Error() string {
	return fmt.Sprintf("fileguard: %q: %s is not a fileguard file: %s", e.Resource, e.Path, e.Reason)
}

// Is reports whether target is ErrCorrupt.
func (e *FileError) Is(target error) bool { return target == ErrCorrupt }

// NotFoundError reports a resource without content. It matches ErrNotFound.
type NotFoundError struct {
	Resource string
	// Deleted is true when a fenced Delete left a tombstone.
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

// Is reports whether target is ErrNotFound or fence.ErrNotFound.
func (e *NotFoundError) Is(target error) bool {
	return target == ErrNotFound || target == fence.ErrNotFound
}

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
