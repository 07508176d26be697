package fence

import (
	"errors"
	"fmt"
	"strings"
)

// ErrOutOfScope is matched by a *ScopeError: a strict guard refused a write
// whose resource lies outside the scope of the claim presented (or whose
// claim has no scope). Nothing was written and no mark moved; retrying with
// the same claim cannot succeed.
var ErrOutOfScope = errors.New("fence: resource outside the claim's scope")

// ErrInvalidScope is matched by errors about a malformed claim scope.
var ErrInvalidScope = errors.New("fence: invalid claim scope")

// ScopeError is a strict guard's refusal of a write to a resource outside
// its claim's scope. It matches ErrOutOfScope.
type ScopeError struct {
	Resource string // the resource name as given to the guard
	Scope    string // the claim's scope; empty when the claim had none
}

// Error implements error.
func (e *ScopeError) Error() string {
	if e.Scope == "" {
		return fmt.Sprintf("fence: write to %q refused: the claim has no scope, and a strict guard admits only claims scoped to a lease key", e.Resource)
	}
	return fmt.Sprintf("fence: write to %q refused: the resource is outside the claim's scope %q", e.Resource, e.Scope)
}

// Is reports whether target is ErrOutOfScope.
func (e *ScopeError) Is(target error) bool { return target == ErrOutOfScope }

// IsOutOfScope returns the *ScopeError in err's chain, if any.
func IsOutOfScope(err error) (*ScopeError, bool) {
	var se *ScopeError
	ok := errors.As(err, &se)
	return se, ok
}

// ValidateScope checks a claim scope: empty (none), or a valid resource name
// ([ValidateResource]) that does not end in '/'. The error matches
// ErrInvalidScope (and not ErrInvalidResource: the resource written may be
// fine).
func ValidateScope(scope string) error {
	if scope == "" {
		return nil
	}
	if err := ValidateResource(scope); err != nil {
		return fmt.Errorf("%w: %s", ErrInvalidScope, strings.TrimPrefix(err.Error(), ErrInvalidResource.Error()+": "))
	}
	if strings.HasSuffix(scope, "/") {
		return fmt.Errorf("%w: ends in '/'", ErrInvalidScope)
	}
	return nil
}

// InScope reports whether resource lies inside scope: it starts with scope
// followed by '/', and has more after it. A scope built with JoinResource
// (lease.Key.Scope) contains every name JoinResource builds from the same
// leading parts plus at least one more, and no name built from other
// leading parts, because JoinResource escapes '/' inside parts. An empty
// scope contains nothing.
func InScope(scope, resource string) bool {
	return scope != "" && len(resource) > len(scope)+1 &&
		strings.HasPrefix(resource, scope) && resource[len(scope)] == '/'
}

// CheckScope is a strict guard's scope rule: nil when resource lies inside
// c.Scope (InScope), a *ScopeError otherwise, also when c has no scope. A
// strict guard applies it, after validating resource and claim and before
// any I/O, to every write; a guard that is not strict ignores scopes.
func CheckScope(resource string, c Claim) error {
	if InScope(c.Scope, resource) {
		return nil
	}
	return &ScopeError{Resource: resource, Scope: c.Scope}
}
