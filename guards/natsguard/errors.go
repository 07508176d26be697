package natsguard

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/fence"
)

// ErrInvalidConfig is matched by every error New returns for a bad Config.
var ErrInvalidConfig = errors.New("natsguard: invalid config")

// ErrBucket is matched by a *BucketError: the bucket's stream may drop
// records on its own (an age limit, or discarding old messages when full),
// or its duplicate window is too short to settle lost replies.
var ErrBucket = errors.New("natsguard: bucket unsuitable for fencing")

// ErrForeignEntry is matched by an *EntryError: the latest record of a key
// was not written by this guard (no token header, or a malformed one). The
// guard neither reads through it nor overwrites it.
var ErrForeignEntry = errors.New("natsguard: entry not written by natsguard")

// ErrNotFound is matched by a *NotFoundError: the resource has no value.
// A *NotFoundError matches fence.ErrNotFound too.
var ErrNotFound = errors.New("natsguard: not found")

// ErrNilContext is matched by the error of every call given a nil
// context; nothing is read or written.
var ErrNilContext = errors.New("natsguard: nil context")

func nilContext(resource string) error {
	return fmt.Errorf("natsguard: %q: %w", resource, ErrNilContext)
}

// BucketError reports a bucket New refuses. It matches ErrBucket and
// unwraps to Err.
type BucketError struct {
	Bucket string
	Reason string
	Err    error // the client's error (jetstream.ErrBucketNotFound), or nil
}

// Error implements error.
func (e *BucketError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("natsguard: bucket %q: %s: %v", e.Bucket, e.Reason, e.Err)
	}
	return fmt.Sprintf("natsguard: bucket %q: %s", e.Bucket, e.Reason)
}

// Unwrap returns Err.
func (e *BucketError) Unwrap() error { return e.Err }

// Is reports whether target is ErrBucket.
func (e *BucketError) Is(target error) bool { return target == ErrBucket }

// EntryError reports a key whose latest record the guard did not write. It
// matches ErrForeignEntry.
type EntryError struct {
	Resource string
	Key      string
	Revision uint64
	Reason   string
}

// Error implements error.
func (e *EntryError) Error() string {
	return fmt.Sprintf("natsguard: %q: key %q revision %d was not written by natsguard: %s", e.Resource, e.Key, e.Revision, e.Reason)
}

// Is reports whether target is ErrForeignEntry.
func (e *EntryError) Is(target error) bool { return target == ErrForeignEntry }

// NotFoundError reports a resource without a value. It matches ErrNotFound.
type NotFoundError struct {
	Resource string
	// Deleted is true when the key's latest record is a tombstone (a
	// fenced Delete) or a delete or purge marker.
	Deleted bool
	// Token is the resource's mark (0 when none is known).
	Token fence.Token
}

// Error implements error.
func (e *NotFoundError) Error() string {
	if e.Deleted {
		return fmt.Sprintf("natsguard: %q not found: deleted (mark %d)", e.Resource, e.Token)
	}
	return fmt.Sprintf("natsguard: %q not found", e.Resource)
}

// Is reports whether target is ErrNotFound or fence.ErrNotFound.
func (e *NotFoundError) Is(target error) bool {
	return target == ErrNotFound || target == fence.ErrNotFound
}

// outcomeUnknown returns the *fence.OutcomeUnknownError of a publish that
// was sent, and re-sent, without a reply.
func outcomeUnknown(ctx context.Context, resource string, err error) error {
	return fence.OutcomeUnknown(ctx, "natsguard: publish", resource, err)
}
