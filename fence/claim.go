package fence

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// MaxRunLen is the longest run identity a [Claim] may carry, in bytes.
const MaxRunLen = 64

// ErrNoToken reports a ctx-first guard call whose context carries no token:
// nothing was written.
var ErrNoToken = errors.New("fence: no token in context")

// ErrInvalidRun reports a malformed run identity.
var ErrInvalidRun = errors.New("fence: invalid run identity")

// ErrTokenReused reports a write whose token equals the resource's mark but
// whose run identity differs from the run that set the mark: the token was
// issued twice (for example by a database promoted from a lagging replica).
// It is neither stale nor busy; retrying cannot succeed.
var ErrTokenReused = errors.New("fence: token reused by a different run")

// Claim is what a write presents to a guard: a token and, optionally, the
// identity of the run that was granted it and the scope of the lease key it
// was granted for. Run is empty for tokens from sources that have no run
// identity; such claims follow the token-only rule. Scope is empty unless
// the claim's source knows its key (a lease sets it to lease.Key.Scope);
// only a strict guard looks at it (see [CheckScope]).
type Claim struct {
	Token Token
	Run   string
	Scope string
}

// Validate reports whether c is well formed: a positive token, a run
// identity that is empty or 1..MaxRunLen bytes of ASCII letters, digits and
// '.', '_', ':', '-', and a scope that is empty or a valid resource name
// ([ValidateScope]).
func (c Claim) Validate() error {
	if err := c.Token.Validate(); err != nil {
		return err
	}
	if err := ValidateRun(c.Run); err != nil {
		return err
	}
	return ValidateScope(c.Scope)
}

// ValidateRun checks a run identity: empty (none), or 1..MaxRunLen bytes of
// ASCII letters, digits and '.', '_', ':', '-'. A canonical UUID qualifies.
func ValidateRun(run string) error {
	if len(run) > MaxRunLen {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrInvalidRun, len(run), MaxRunLen)
	}
	for i := 0; i < len(run); i++ {
		c := run[i]
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '.', c == '_', c == ':', c == '-':
		default:
			return fmt.Errorf("%w: byte %#x at %d", ErrInvalidRun, c, i)
		}
	}
	return nil
}

// ReusedError is the refusal of a write whose token equals the resource's
// mark while its run identity differs from the mark's. It matches
// [ErrTokenReused].
type ReusedError struct {
	Resource string // the resource name as given to the guard
	Token    Token  // the token of the write and of the mark
	Run      string // the refused write's run identity
	MarkRun  string // the run identity stored with the mark
}

func (e *ReusedError) Error() string {
	return fmt.Sprintf("fence: token %d for %q reused: mark was set by run %q, write is from run %q",
		e.Token, e.Resource, e.MarkRun, e.Run)
}

// Is reports whether target is ErrTokenReused.
func (e *ReusedError) Is(target error) bool { return target == ErrTokenReused }

// IsReused returns the *ReusedError in err's chain, if any.
func IsReused(err error) (*ReusedError, bool) {
	var re *ReusedError
	ok := errors.As(err, &re)
	return re, ok
}

// DecideClaim applies the decision rule with run identities: a claim below
// the mark is stale (*StaleError); a claim equal to the mark whose run differs
// from the mark's run, both non-empty, is a reuse (*ReusedError); anything
// else is admitted. An admitted write stores [NextMark]'s result.
func DecideClaim(resource string, c Claim, markToken Token, markRun string) error {
	if err := Decide(resource, c.Token, markToken); err != nil {
		return err
	}
	if c.Token == markToken && c.Run != "" && markRun != "" && c.Run != markRun {
		return &ReusedError{Resource: resource, Token: c.Token, Run: c.Run, MarkRun: markRun}
	}
	return nil
}

// NextMark returns the mark a resource stores after admitting c over the
// mark (markToken, markRun): the claim's token, with the claim's run when it
// has one, the old run when the token is unchanged and the claim has none
// (a run-less write never erases the identity that detects reuse), and no
// run otherwise.
func NextMark(c Claim, markToken Token, markRun string) (Token, string) {
	switch {
	case c.Run != "":
		return c.Token, c.Run
	case c.Token == markToken:
		return c.Token, markRun
	default:
		return c.Token, ""
	}
}

// JoinResource builds a resource name from parts with an unambiguous
// encoding: each part is path-escaped ('/' and '%' among others become %XX),
// a part that is "." or ".." has its dots escaped too, an empty part becomes
// "%00" (what a part holding a single NUL byte, never a valid id, would
// give), and the parts are joined with '/'. So ("a/b", "c") and ("a", "b/c")
// give different names, and the result has no empty, "." or ".." segment: it
// is safe as an S3 or GCS object key. Use it to scope a resource to a lease
// key (lease.Key.Resource does). Escaping can triple a part's length; check
// the result with ValidateResource when parts are long.
func JoinResource(parts ...string) string {
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteByte('/')
		}
		switch p {
		case "":
			b.WriteString("%00")
		case ".":
			b.WriteString("%2E")
		case "..":
			b.WriteString("%2E%2E")
		default:
			b.WriteString(url.PathEscape(p))
		}
	}
	return b.String()
}
