package natsguard

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/fence"
)

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

// outcomeUnknown returns the *fence.OutcomeUnknownError of a publish that
// was sent, and re-sent, without a reply.
func outcomeUnknown(ctx context.Context, resource string, err error) error {
	return fence.OutcomeUnknown(ctx, "natsguard: publish", resource, err)
}

// configErr is the *fence.ConfigError of a natsguard Config field.
func configErr(field, reason string, err error) error {
	return &fence.ConfigError{Source: "natsguard", Field: field, Reason: reason, Err: err}
}
