package gcsguard

import (
	"errors"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/internal/objstage"
)

// ErrInvalidOptions is matched by errors about malformed PutOptions, a nil
// reader or a size below -1. Nothing is written.
var ErrInvalidOptions = errors.New("gcsguard: invalid put options")

// ErrSizeMismatch is matched by a *SizeError: content shorter or longer
// than the size Put or Stage was given. Nothing is written.
var ErrSizeMismatch = errors.New("gcsguard: content length differs from the declared size")

// SizeError reports content whose length differs from the size a Put or
// Stage was given. It matches ErrSizeMismatch. Nothing was
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

// configErr is the *fence.ConfigError of a gcsguard Config field.
func configErr(field, reason string, err error) error {
	return &fence.ConfigError{Source: "gcsguard", Field: field, Reason: reason, Err: err}
}
