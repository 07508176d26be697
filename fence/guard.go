package fence

import (
	"context"
	"fmt"
	"unicode/utf8"
)

// Guard is the contract every fencekit store adapter implements.
//
// Fence runs write only if token is admitted for resource by the decision
// rule (token >= the resource's high-water mark), and raises the mark to token
// if and only if write returns nil. Admission, write and the raise are atomic
// with respect to every other Fence call on the same resource: no write with a
// lower token can be accepted after a higher one was.
//
// How write makes its effects part of that atomic step is adapter specific:
// the PostgreSQL guard hands write a transaction through ctx, the S3 guard
// publishes what write staged through a conditional write, the in-process
// guard holds a per-resource lock while write runs. A refused call returns an
// error matching ErrStale and does not call write. If write fails, Fence
// returns its error (wrapped or as is) and the mark is unchanged. If the
// request that commits (a COMMIT, a conditional write) was sent and no
// answer came back, Fence returns an error matching ErrOutcomeUnknown
// (unless it settled the outcome): write's effects and the raised mark may
// have been applied together, or neither.
type Guard interface {
	Fence(ctx context.Context, resource string, token Token, write func(ctx context.Context) error) error
}

// Decide applies the decision rule to a resource whose mark is highest.
// It returns nil when token may be accepted and a *StaleError otherwise.
// Adapters call it inside their atomic step; it does no I/O.
func Decide(resource string, token, highest Token) error {
	if token < highest {
		return &StaleError{Resource: resource, Presented: token, Highest: highest}
	}
	return nil
}

// MaxResourceLen bounds resource names accepted by ValidateResource.
const MaxResourceLen = 512

// ValidateResource checks a resource name: non-empty, at most MaxResourceLen
// bytes, valid UTF-8, and free of NUL and other ASCII control characters.
// It returns a *ResourceError (matching ErrInvalidResource) otherwise.
// Guards may impose stricter rules of their own, reported the same way.
func ValidateResource(name string) error {
	bad := func(reason string) error { return &ResourceError{Resource: name, Reason: reason} }
	switch {
	case name == "":
		return bad("empty")
	case len(name) > MaxResourceLen:
		return bad(fmt.Sprintf("%d bytes, limit %d", len(name), MaxResourceLen))
	case !utf8.ValidString(name):
		return bad("not valid UTF-8")
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return bad(fmt.Sprintf("contains control character %U", r))
		}
	}
	return nil
}

// CheckArgs validates a resource name and token together, as every Fence
// implementation should before touching its store.
func CheckArgs(resource string, token Token) error {
	if err := ValidateResource(resource); err != nil {
		return err
	}
	return token.Validate()
}
