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

// ForeignError reports a key whose latest record the guard did not write
// (no token header, or a malformed one). It matches fence.ErrForeign. The
// guard neither reads through it nor overwrites it.
type ForeignError struct {
	Resource string
	Key      string
	Revision uint64
	Reason   string
}

// Error implements error.
func (e *ForeignError) Error() string {
	return fmt.Sprintf("natsguard: %q: key %q revision %d was not written by natsguard: %s", e.Resource, e.Key, e.Revision, e.Reason)
}

// Is reports whether target is fence.ErrForeign.
func (e *ForeignError) Is(target error) bool { return target == fence.ErrForeign }

// NotFoundError reports a resource without a value. It matches
// fence.ErrNotFound.
type NotFoundError struct {
	Resource string
	// Deleted is true when the key's latest record is a tombstone (a
	// fenced Delete, or a Fence that staged nothing over no value) or a
	// delete or purge marker.
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

// Is reports whether target is fence.ErrNotFound.
func (e *NotFoundError) Is(target error) bool { return target == fence.ErrNotFound }

// outcomeUnknown returns the *fence.OutcomeUnknownError of a publish that
// was sent, and re-sent, without a reply.
func outcomeUnknown(ctx context.Context, resource string, err error) error {
	return fence.OutcomeUnknown(ctx, "natsguard: publish", resource, err)
}
