package gcsguard

import (
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/internal/objstage"
)

// ErrInvalidConfig is matched by every error New returns for a bad Config.
var ErrInvalidConfig = errors.New("gcsguard: invalid config")

// ErrInvalidOptions is matched by errors about malformed PutOptions, a nil
// reader or a size below -1. Nothing is written.
var ErrInvalidOptions = errors.New("gcsguard: invalid put options")

// ErrNilWrite is returned by Fence when its write callback is nil. Nothing is
// read or written.
var ErrNilWrite = errors.New("gcsguard: Fence with a nil write")

// ErrNoStager is returned by Stage and StageDelete when ctx does not come
// from a running Guard.Fence write callback.
var ErrNoStager = errors.New("gcsguard: Stage called outside a Fence write")

// ErrAlreadyStaged is returned by Stage and StageDelete when the current
// Fence write has already staged a change.
var ErrAlreadyStaged = errors.New("gcsguard: this write has already staged a change")

// ErrStageClosed is returned by Stage and StageDelete when the Fence call
// whose context they were given has already returned.
var ErrStageClosed = errors.New("gcsguard: the Fence call of this context has returned")

// ErrNilContext is matched by the error of every call given a nil context;
// nothing is read or written.
var ErrNilContext = errors.New("gcsguard: nil context")

func nilContext(resource string) error {
	return fmt.Errorf("gcsguard: %q: %w", resource, ErrNilContext)
}

// errs are the package's errors for the write path it shares with s3guard.
var errs = &objstage.Errors{
	NoStager: ErrNoStager, AlreadyStaged: ErrAlreadyStaged, Closed: ErrStageClosed,
	NilWrite: ErrNilWrite, NilContext: nilContext, Prefix: "gcsguard",
}

// ErrNotFound is matched by a *NotFoundError: the resource has no object, or
// its object is a tombstone left by a fenced Delete.
var ErrNotFound = errors.New("gcsguard: not found")

// NotFoundError reports a resource without content. It matches ErrNotFound.
type NotFoundError struct {
	Resource string
	// Deleted is true when a tombstone is in place.
	Deleted bool
	// Token is the tombstone's token, the resource's high-water mark; zero
	// when the resource has no object at all.
	Token fence.Token
}

// Error implements error.
func (e *NotFoundError) Error() string {
	return objstage.NotFoundMessage("gcsguard", e.Resource, e.Deleted, e.Token)
}

// Is reports whether target is ErrNotFound or fence.ErrNotFound.
func (e *NotFoundError) Is(target error) bool {
	return target == ErrNotFound || target == fence.ErrNotFound
}

// ErrForeignObject is matched by an *ObjectError: the object of a resource
// was not written by gcsguard (it lacks fencekit metadata) or its fencekit
// metadata is malformed. The guard neither reads through it nor overwrites
// it.
var ErrForeignObject = errors.New("gcsguard: object not written by gcsguard")

// ObjectError reports the object of Resource whose metadata is not
// gcsguard's. It matches ErrForeignObject.
type ObjectError struct {
	Resource   string
	Generation int64
	Reason     string
}

// Error implements error.
func (e *ObjectError) Error() string {
	return fmt.Sprintf("gcsguard: object %q (generation %d) was not written by gcsguard: %s", e.Resource, e.Generation, e.Reason)
}

// Is reports whether target is ErrForeignObject.
func (e *ObjectError) Is(target error) bool { return target == ErrForeignObject }

// ErrSizeMismatch is matched by a *SizeError: content shorter or longer
// than the size Put, PutClaim or Stage was given. Nothing is written.
var ErrSizeMismatch = errors.New("gcsguard: content length differs from the declared size")

// SizeError reports content whose length differs from the size a Put,
// PutClaim or Stage was given. It matches ErrSizeMismatch. Nothing was
// written.
type SizeError struct {
	Resource string
	Size     int64 // the declared size
	// Read is the number of bytes read when the mismatch was seen: fewer
	// than Size when the content ended early, more than Size when it went
	// on.
	Read int64
}

// Error implements error.
func (e *SizeError) Error() string {
	return objstage.SizeMessage("gcsguard", e.Resource, e.Size, e.Read)
}

// Is reports whether target is ErrSizeMismatch.
func (e *SizeError) Is(target error) bool { return target == ErrSizeMismatch }

// ResourceError reports a resource (object name) the guard refuses. It
// matches fence.ErrInvalidResource.
type ResourceError struct {
	Resource string // the refused resource, truncated to 64 bytes
	Reason   string
}

// Error implements error.
func (e *ResourceError) Error() string {
	return objstage.ResourceMessage("gcsguard", e.Resource, e.Reason)
}

// Is reports whether target is fence.ErrInvalidResource.
func (e *ResourceError) Is(target error) bool { return target == fence.ErrInvalidResource }
