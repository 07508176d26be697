package fence

import (
	"context"
	"errors"
	"fmt"
)

// ErrOutcomeUnknown is matched by the error of a guarded write whose
// committing request (a COMMIT, a conditional PUT, an HTTP request) was sent
// but whose reply never arrived: the store may have applied the write, or
// not, or may still apply it. It is neither "nothing was written" (the
// context errors and fence.ErrBusy say that) nor a refusal. Read the
// resource back before assuming either, or retry with the same claim: a
// guard admits a token equal to its mark, so the retry is accepted whether
// or not the first attempt landed (unless a newer holder wrote meanwhile:
// then it is refused as stale).
var ErrOutcomeUnknown = errors.New("fence: outcome unknown")

// OutcomeUnknownError is the error of a guarded write whose committing
// request may have been applied although no reply confirmed it. It matches
// ErrOutcomeUnknown and unwraps to Err: once the call's context has ended,
// Err matches ctx.Err() and context.Cause(ctx) too ([OutcomeUnknown] builds
// it so), so code that checks for a lost lease still sees one.
type OutcomeUnknownError struct {
	Op       string // the request in flight, prefixed by the guard: "pgguard: commit"
	Resource string // the resource name as given to the guard
	Err      error  // what came back instead of the reply
}

// Error implements error.
func (e *OutcomeUnknownError) Error() string {
	return fmt.Sprintf("%s %q: outcome unknown (the request was sent, no reply came back; it may have been applied): %v",
		e.Op, e.Resource, e.Err)
}

// Is reports whether target is ErrOutcomeUnknown.
func (e *OutcomeUnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }

// Unwrap returns Err.
func (e *OutcomeUnknownError) Unwrap() error { return e.Err }

// OutcomeUnknown returns the *OutcomeUnknownError of the request op on
// resource that was sent and failed with err without a reply. Its Err is
// WrapContext(ctx, err): once ctx has ended it matches ctx.Err() and
// context.Cause(ctx) as well as err. Guards call it for every failure after
// the point of no return, and only then; a failure before the request left
// is reported with ContextError or WrapContext alone ("nothing written").
func OutcomeUnknown(ctx context.Context, op, resource string, err error) error {
	return &OutcomeUnknownError{Op: op, Resource: resource, Err: WrapContext(ctx, err)}
}

// IsOutcomeUnknown returns the *OutcomeUnknownError in err's chain, if any.
func IsOutcomeUnknown(err error) (*OutcomeUnknownError, bool) {
	var oe *OutcomeUnknownError
	ok := errors.As(err, &oe)
	return oe, ok
}
