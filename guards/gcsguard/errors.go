package gcsguard

import (
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/fence"
)

// ErrNotFound is matched by a *NotFoundError: the key has no object, or its
// object is a tombstone left by a fenced Delete.
var ErrNotFound = errors.New("gcsguard: not found")

// ErrForeignObject is matched by an *ObjectError: the object at a key was
// not written by gcsguard (it lacks fencekit metadata) or its fencekit
// metadata is malformed. The guard neither reads through it nor overwrites
// it.
var ErrForeignObject = errors.New("gcsguard: object not written by gcsguard")

// ErrInvalidConfig is matched by every error New returns for a bad Config.
var ErrInvalidConfig = errors.New("gcsguard: invalid config")

// ErrInvalidOptions is matched by errors about malformed PutOptions. Nothing
// is written.
var ErrInvalidOptions = errors.New("gcsguard: invalid put options")

// ErrNilWrite is returned by Fence when its write callback is nil. Nothing is
// read or written.
var ErrNilWrite = errors.New("gcsguard: Fence with a nil write")

// ErrNoStager is returned by Stage and StageDelete when ctx does not come
// from a running Store.Fence write callback.
var ErrNoStager = errors.New("gcsguard: Stage called outside a Fence write")

// ErrAlreadyStaged is returned by Stage and StageDelete when the current
// Fence write has already staged a change.
var ErrAlreadyStaged = errors.New("gcsguard: this write has already staged a change")

// ErrStageClosed is returned by Stage and StageDelete when the Fence call
// whose context they were given has already returned.
var ErrStageClosed = errors.New("gcsguard: the Fence call of this context has returned")

// KeyError reports an object name the guard refuses. It matches
// fence.ErrInvalidResource.
type KeyError struct {
	Key    string // the refused key, truncated to 64 bytes
	Reason string
}

// Error implements error.
func (e *KeyError) Error() string {
	return fmt.Sprintf("gcsguard: invalid key %q: %s", e.Key, e.Reason)
}

// Is reports whether target is fence.ErrInvalidResource.
func (e *KeyError) Is(target error) bool { return target == fence.ErrInvalidResource }

// NotFoundError reports a key without content. It matches ErrNotFound.
type NotFoundError struct {
	Key string
	// Deleted is true when a tombstone is in place.
	Deleted bool
	// Token is the tombstone's token, the key's high-water mark; zero when
	// the key has no object at all.
	Token fence.Token
}

// Error implements error.
func (e *NotFoundError) Error() string {
	if e.Deleted {
		return fmt.Sprintf("gcsguard: %q not found: deleted under token %d", e.Key, e.Token)
	}
	return fmt.Sprintf("gcsguard: %q not found", e.Key)
}

// Is reports whether target is ErrNotFound.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// ObjectError reports an object at Key whose metadata is not gcsguard's. It
// matches ErrForeignObject.
type ObjectError struct {
	Key        string
	Generation int64
	Reason     string
}

// Error implements error.
func (e *ObjectError) Error() string {
	return fmt.Sprintf("gcsguard: object %q (generation %d) was not written by gcsguard: %s", e.Key, e.Generation, e.Reason)
}

// Is reports whether target is ErrForeignObject.
func (e *ObjectError) Is(target error) bool { return target == ErrForeignObject }
