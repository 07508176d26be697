package s3guard

import (
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/internal/objstage"
)

// ErrNotFound is matched (errors.Is) by a *NotFoundError: the resource has
// no pointer, or its pointer is a tombstone left by a fenced Delete.
var ErrNotFound = errors.New("s3guard: not found")

// ErrNotPointer is matched by a *PointerError: the object stored at a
// resource's key is not a valid s3guard pointer (someone wrote it without the guard, or it is
// damaged). The guard refuses to read through it or to overwrite it.
var ErrNotPointer = errors.New("s3guard: object is not an s3guard pointer")

// ErrCorrupt is matched by a *DataError: the pointer is valid but the data
// object it names is gone or was replaced, outside the guard.
var ErrCorrupt = errors.New("s3guard: data object missing or replaced")

// ErrInvalidConfig is matched by every error New returns for a bad Config.
var ErrInvalidConfig = errors.New("s3guard: invalid config")

// ErrInvalidOptions is matched by errors about malformed PutOptions (content
// type, metadata) or a negative size other than -1. Nothing is written.
var ErrInvalidOptions = errors.New("s3guard: invalid put options")

// ErrNoStager is returned by Stage and StageDelete when ctx does not come
// from a running Guard.Fence write callback.
var ErrNoStager = errors.New("s3guard: Stage called outside a Fence write")

// ErrAlreadyStaged is returned by Stage and StageDelete when the current
// Fence write has already staged content or a delete. One write commits at
// most one change.
var ErrAlreadyStaged = errors.New("s3guard: this write has already staged a change")

// ErrNilWrite is returned by Fence when its write callback is nil. Nothing
// is read or written.
var ErrNilWrite = errors.New("s3guard: Fence with a nil write")

// ErrStageClosed is returned by Stage and StageDelete when the Fence call
// whose context they were given has already returned.
var ErrStageClosed = errors.New("s3guard: the Fence call of this context has returned")

// ErrSizeMismatch is matched by a *SizeError: content shorter or longer
// than the size Put, PutClaim or Stage was given. Nothing is written.
var ErrSizeMismatch = errors.New("s3guard: content length differs from the declared size")

// SizeError reports content whose length differs from the size a Put,
// PutClaim or Stage was given. It matches ErrSizeMismatch. Nothing was
// written: no pointer was published, and data staged for it was removed.
type SizeError struct {
	Resource string
	Size     int64 // the declared size
	// Read is the content's length as far as it was seen: the whole length
	// when the content ended early or was measured (an io.Seeker), Size+1
	// when a reader went on past Size.
	Read int64
}

// Error implements error.
func (e *SizeError) Error() string {
	return objstage.SizeMessage("s3guard", e.Resource, e.Size, e.Read)
}

// Is reports whether target is ErrSizeMismatch.
func (e *SizeError) Is(target error) bool { return target == ErrSizeMismatch }

// NotFoundError reports a resource without content. It matches
// ErrNotFound.
type NotFoundError struct {
	Resource string
	// Deleted is true when a tombstone is in place (a fenced Delete, or a
	// Fence call that staged nothing on a resource without content).
	Deleted bool
	// Token is the tombstone's token, the resource's high-water mark; zero
	// when the resource has no pointer at all.
	Token fence.Token
}

// Error implements error.
func (e *NotFoundError) Error() string {
	return objstage.NotFoundMessage("s3guard", e.Resource, e.Deleted, e.Token)
}

// Is reports whether target is ErrNotFound or fence.ErrNotFound.
func (e *NotFoundError) Is(target error) bool {
	return target == ErrNotFound || target == fence.ErrNotFound
}

// ErrNilContext is matched by the error of every call given a nil context;
// nothing is read or written.
var ErrNilContext = errors.New("s3guard: nil context")

func nilContext(key string) error {
	return fmt.Errorf("s3guard: %q: %w", truncate(key), ErrNilContext)
}

// errs are the package's errors for the write path it shares with gcsguard.
var errs = &objstage.Errors{
	NoStager: ErrNoStager, AlreadyStaged: ErrAlreadyStaged, Closed: ErrStageClosed,
	NilWrite: ErrNilWrite, NilContext: nilContext, Prefix: "s3guard",
}

// PointerError reports an object at Resource that is not a valid pointer.
// It matches ErrNotPointer.
type PointerError struct {
	Resource string
	Reason   string
}

// Error implements error.
func (e *PointerError) Error() string {
	return fmt.Sprintf("s3guard: object %q is not an s3guard pointer: %s", e.Resource, e.Reason)
}

// Is reports whether target is ErrNotPointer.
func (e *PointerError) Is(target error) bool { return target == ErrNotPointer }

// DataError reports a pointer whose data object is missing or does not
// carry the ETag the pointer recorded. It matches ErrCorrupt.
type DataError struct {
	Resource string
	DataKey  string // the S3 key of the data object
	Reason   string
}

// Error implements error.
func (e *DataError) Error() string {
	return fmt.Sprintf("s3guard: %q: data object %q %s", e.Resource, e.DataKey, e.Reason)
}

// Is reports whether target is ErrCorrupt.
func (e *DataError) Is(target error) bool { return target == ErrCorrupt }

// ResourceError reports a resource (object key) the guard does not accept.
// It matches fence.ErrInvalidResource.
type ResourceError struct {
	Resource string // the rejected resource, truncated to 64 bytes
	Reason   string
}

// Error implements error.
func (e *ResourceError) Error() string {
	return objstage.ResourceMessage("s3guard", e.Resource, e.Reason)
}

// Unwrap returns fence.ErrInvalidResource.
func (e *ResourceError) Unwrap() error { return fence.ErrInvalidResource }

func resourceErr(resource, reason string) error {
	if len(resource) > 64 {
		resource = resource[:64]
	}
	return &ResourceError{Resource: resource, Reason: reason}
}
