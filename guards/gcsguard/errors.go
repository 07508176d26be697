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

// NotFoundError reports a resource without content: it has no object, or
// its object is a tombstone left by a fenced Delete. It matches
// fence.ErrNotFound.
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

// Is reports whether target is fence.ErrNotFound.
func (e *NotFoundError) Is(target error) bool { return target == fence.ErrNotFound }

// ForeignError reports the object of Resource that gcsguard did not write
// (it lacks fencekit metadata) or whose fencekit metadata is malformed. It
// matches fence.ErrForeign. The guard neither reads through it nor
// overwrites it.
type ForeignError struct {
	Resource   string
	Generation int64
	Reason     string
}

// Error implements error.
func (e *ForeignError) Error() string {
	return fmt.Sprintf("gcsguard: object %q (generation %d) was not written by gcsguard: %s", e.Resource, e.Generation, e.Reason)
}

// Is reports whether target is fence.ErrForeign.
func (e *ForeignError) Is(target error) bool { return target == fence.ErrForeign }

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
