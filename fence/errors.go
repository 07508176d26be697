package fence

import (
	"errors"
	"fmt"
)

// ErrStale is matched (errors.Is) by a *StaleError: the presented token is
// lower than one the resource has already accepted.
var ErrStale = errors.New("fence: stale token")

// ErrBusy means the resource could not decide now (a lock wait timed out, a
// concurrent conditional write won a race that is worth retrying). The write
// did not happen; retrying with the same token is safe.
var ErrBusy = errors.New("fence: resource busy, retry")

// ErrInvalidResource is matched by errors about malformed resource names.
var ErrInvalidResource = errors.New("fence: invalid resource name")

// StaleError is returned when a write presents a token below the resource's
// high-water mark. It matches ErrStale.
type StaleError struct {
	Resource  string // the resource name as given to the guard
	Presented Token  // the token the refused write carried
	Highest   Token  // the highest token the resource had accepted
	// Overtaken is true when the refused write's own request was sent and
	// its reply lost before the guard found the higher mark: the write may
	// have been applied and then overwritten by the newer holder, or never
	// applied. False means the refusal is certain: this write never took
	// effect.
	Overtaken bool
}

// Error implements error.
func (e *StaleError) Error() string {
	if e.Overtaken {
		return fmt.Sprintf("fence: stale token %d for %q: resource has accepted %d (this write's reply was lost: it may have been applied before being overtaken)", e.Presented, e.Resource, e.Highest)
	}
	return fmt.Sprintf("fence: stale token %d for %q: resource has accepted %d", e.Presented, e.Resource, e.Highest)
}

// Is reports whether target is ErrStale.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// IsStale reports whether err is, or wraps, a stale-token refusal, and returns
// it.
func IsStale(err error) (*StaleError, bool) {
	var se *StaleError
	ok := errors.As(err, &se)
	return se, ok
}

// ErrNotFound is matched by the error of a guard's read of a resource that
// holds no value: never written, or deleted by a fenced delete. Every guard's
// read matches it, whatever its store calls a missing key; the guards that
// know more return a *NotFoundError.
var ErrNotFound = errors.New("fence: not found")

// ErrNotApplied is matched by a *NotAppliedError: the guard sent a write's
// committing request, lost its reply, and then settled that the write was
// not applied and never will be (its copy in transit can no longer take
// effect). Nothing was written; unlike ErrBusy it says a request did leave,
// and unlike ErrOutcomeUnknown the outcome is known. Retrying under the same
// claim is safe.
var ErrNotApplied = errors.New("fence: settled: not applied")

// NotAppliedError is the error of a write whose reply was lost and whose
// outcome the guard then settled as "not applied". It matches ErrNotApplied
// and unwraps to Err (what came back instead of the reply; once the call's
// context has ended it matches ctx.Err() and context.Cause(ctx) too).
type NotAppliedError struct {
	Op       string // the request whose reply was lost, prefixed by the guard: "redisguard: put"
	Resource string // the resource name as given to the guard
	Err      error  // what came back instead of the reply
}

// Error implements error.
func (e *NotAppliedError) Error() string {
	return fmt.Sprintf("%s %q: not applied (the reply was lost; settled: the write did not and will not take effect): %v",
		e.Op, e.Resource, e.Err)
}

// Is reports whether target is ErrNotApplied.
func (e *NotAppliedError) Is(target error) bool { return target == ErrNotApplied }

// Unwrap returns Err.
func (e *NotAppliedError) Unwrap() error { return e.Err }

// IsNotApplied returns the *NotAppliedError in err's chain, if any.
func IsNotApplied(err error) (*NotAppliedError, bool) {
	var ne *NotAppliedError
	ok := errors.As(err, &ne)
	return ne, ok
}

// ErrForeign is matched by a guard's error for a stored value or mark that
// the guard did not write, or cannot read: a key, file, record, row or
// object without the guard's mark, or with a malformed one. The guard
// neither reads through it nor overwrites it; nothing was written. Every
// guard's typed error for it is a *ForeignError.
var ErrForeign = errors.New("fence: value or mark not written by this guard, or unreadable")

// ForeignError reports a stored value or mark that the guard named by Source
// did not write, or cannot read. It matches ErrForeign. The guard neither
// reads through it nor overwrites it; nothing was written. It is the one
// type every guard returns for this meaning.
type ForeignError struct {
	Source   string // the guard that refused it: "s3guard", "natsguard", ...
	Resource string // the resource name as given to the guard
	// Key is where the store holds what was found, when it is not Resource
	// itself: a redisguard key, a natsguard key, a fileguard path. Empty
	// otherwise.
	Key string
	// Version is the store's version of what was found: a gcsguard object's
	// generation, a natsguard record's revision. Zero when the store has
	// none or it is not known.
	Version int64
	Reason  string // what is wrong with it
}

// Error implements error.
func (e *ForeignError) Error() string {
	msg := fmt.Sprintf("%s: %q", e.Source, e.Resource)
	if e.Key != "" {
		msg += fmt.Sprintf(": %s", e.Key)
	}
	if e.Version != 0 {
		msg += fmt.Sprintf(" (version %d)", e.Version)
	}
	return msg + fmt.Sprintf(": not written by %s, or unreadable: %s", e.Source, e.Reason)
}

// Is reports whether target is ErrForeign.
func (e *ForeignError) Is(target error) bool { return target == ErrForeign }

// NotFoundError reports a read of a resource without a value. It matches
// ErrNotFound. It is the one type every guard's read returns for it.
type NotFoundError struct {
	Source   string // the guard that read it: "s3guard", "fileguard", ...
	Resource string // the resource name as given to the guard
	// Deleted is true when a tombstone (or the store's delete marker) is in
	// place: a fenced delete, or a Fence call that staged nothing over no
	// value.
	Deleted bool
	// Token is the resource's mark (the tombstone's token when Deleted);
	// zero when the resource was never written or the guard knows no mark.
	Token Token
}

// Error implements error.
func (e *NotFoundError) Error() string {
	switch {
	case e.Deleted:
		return fmt.Sprintf("%s: %q not found: deleted under token %d", e.Source, e.Resource, e.Token)
	case e.Token != 0:
		return fmt.Sprintf("%s: %q not found (mark %d: no value)", e.Source, e.Resource, e.Token)
	}
	return fmt.Sprintf("%s: %q not found", e.Source, e.Resource)
}

// Is reports whether target is ErrNotFound.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// ErrSizeMismatch is matched by every *SizeError.
var ErrSizeMismatch = errors.New("fence: content length differs from the declared size")

// SizeError reports content whose length differs from the size a guard's
// Put or Stage was given (s3guard, gcsguard). It matches ErrSizeMismatch.
// Nothing was written: the guard published nothing and removed whatever it
// had uploaded for the content.
type SizeError struct {
	Source   string // the guard that refused it: "s3guard", "gcsguard"
	Resource string // the resource name as given to the guard
	Size     int64  // the declared size
	// Read is the content's length as far as it was seen: the whole length
	// when the content ended early or was measured (an io.Seeker), more
	// than Size when a reader went on past it.
	Read int64
}

// Error implements error.
func (e *SizeError) Error() string {
	if e.Read > e.Size {
		return fmt.Sprintf("%s: %q: content longer than its declared size of %d bytes", e.Source, e.Resource, e.Size)
	}
	return fmt.Sprintf("%s: %q: content of %d bytes, declared size %d", e.Source, e.Resource, e.Read, e.Size)
}

// Is reports whether target is ErrSizeMismatch.
func (e *SizeError) Is(target error) bool { return target == ErrSizeMismatch }

// ErrInvalidConfig is matched by every *ConfigError: a constructor (New and
// its kin in lease and every guard) or a method refused a Config field, or
// found one it needs missing, before any I/O.
var ErrInvalidConfig = errors.New("fence: invalid config")

// ConfigError reports a Config field that is invalid, or missing for the
// call made. It matches ErrInvalidConfig and unwraps to Err. Every fencekit
// package reports a bad Config with it.
type ConfigError struct {
	Source string // the package that refused it: "lease", "pgguard", ...
	Field  string // the field as its Config names it: "Schema", "MaxAttempts"
	Reason string // what is wrong with it
	Err    error  // the underlying cause, if any
}

// Error implements error.
func (e *ConfigError) Error() string {
	msg := e.Source + ": invalid config " + e.Field + ": " + e.Reason
	if e.Err != nil && e.Err.Error() != e.Reason {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is reports whether target is ErrInvalidConfig.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// Unwrap returns Err.
func (e *ConfigError) Unwrap() error { return e.Err }

// ErrNilArgument is matched by the error of a guard call given a nil
// context, a nil write callback or function, or a nil transaction or
// querier, and by lease.Manager.Run's for a nil context or function. It is
// returned before any I/O; nothing was written.
var ErrNilArgument = errors.New("fence: nil argument")

// ErrNoStager is returned by Stage and StageDelete when ctx does not come
// from a running Fence (or Do) write callback of a guard that stages (it
// comes from none, or from the callback of memguard, pgguard or
// mysqlguard), and by s3guard's and gcsguard's own staging calls when it
// does not come from one of that guard.
var ErrNoStager = errors.New("fence: Stage called outside a Fence write")

// ErrAlreadyStaged is returned by Stage and StageDelete (and a guard's own
// staging calls) when the current Fence write has already staged a change.
var ErrAlreadyStaged = errors.New("fence: this write has already staged a change")

// ErrStageClosed is returned by Stage and StageDelete (and a guard's own
// staging calls) when the Fence call whose context they were given has
// returned.
var ErrStageClosed = errors.New("fence: the Fence call of this context has returned")

// ResourceError reports a resource name that fence.ValidateResource, or a
// guard's stricter rules of its own, refuse. It matches (unwraps to)
// ErrInvalidResource.
type ResourceError struct {
	Resource string // the name as given
	Reason   string // why it is refused
}

// Error implements error. A name longer than 64 bytes is cut in the
// message (Resource keeps it whole).
func (e *ResourceError) Error() string {
	name := e.Resource
	if len(name) > 64 {
		name = name[:64] + "..."
	}
	return fmt.Sprintf("fence: invalid resource name %q: %s", name, e.Reason)
}

// Unwrap returns ErrInvalidResource.
func (e *ResourceError) Unwrap() error { return ErrInvalidResource }
