package s3guard

import (
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/fence"
)

// ErrCorrupt is matched by a *DataError: the pointer is valid but the data
// object it names is gone or was replaced, outside the guard.
var ErrCorrupt = errors.New("s3guard: data object missing or replaced")

// ErrInvalidOptions is matched by errors about malformed PutOptions (content
// type, metadata) or a negative size other than -1. Nothing is written.
var ErrInvalidOptions = errors.New("s3guard: invalid put options")

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

// resourceErr is the error of a resource the guard refuses.
func resourceErr(resource, reason string) error {
	return &fence.ResourceError{Resource: resource, Reason: reason}
}

// configErr is the *fence.ConfigError of a s3guard Config field.
func configErr(field, reason string, err error) error {
	return &fence.ConfigError{Source: "s3guard", Field: field, Reason: reason, Err: err}
}
