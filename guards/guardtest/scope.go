package guardtest

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/fence"
)

// StrictWriter is implemented by Subjects that can write through the guard
// in its strict mode (every guard has one: Config.Strict or the like), in
// which a write whose resource lies outside its claim's scope, or whose
// claim has no scope, is refused with a *fence.ScopeError
// (fence.ErrOutOfScope) before anything is written. WriteStrict performs
// WriteClaim's write of value to resource under c through such a guard,
// over the same store that Read reads (it may keep marks apart from
// Write's guard).
type StrictWriter interface {
	WriteStrict(ctx context.Context, resource string, c fence.Claim, value string) error
}

// InterfaceStrictWriter names StrictWriter in Config.Pending.
const InterfaceStrictWriter = "StrictWriter"

// checkStrictScope checks the strict mode (fence.CheckScope): with the
// claims of two keys A and B (scopes S_A and S_B), a strict write under A's
// claim to a resource in S_A is accepted; B's claim, with a higher token,
// to that resource is refused with a *fence.ScopeError naming the resource
// and S_B (neither stale nor busy) and changes nothing — A's token is still
// admitted, so the mark did not move; so is a claim without a scope, a
// resource equal to its claim's scope, and a claim whose scope is a mere
// text prefix of the resource's scope. A malformed scope is refused with
// fence.ErrInvalidScope by WriteStrict and by WriteClaim (strict or not, a
// malformed claim is bad input). Needs a StrictWriter and a ClaimWriter.
func checkStrictScope(ctx context.Context, s Subject, cfg Config) error {
	sw, ok := s.(StrictWriter)
	if !ok {
		return &unsupportedError{Interface: InterfaceStrictWriter}
	}
	cw, ok := s.(ClaimWriter)
	if !ok {
		return &unsupportedError{Interface: InterfaceClaimWriter}
	}
	base := resourceName(cfg, "scope", 0)
	scopeA, scopeB := base+"/acme/conv-1", base+"/acme/conv-2"
	r := scopeA + "/notes"
	a := fence.Claim{Token: 5, Run: runA, Scope: scopeA}
	b := fence.Claim{Token: 9, Run: runB, Scope: scopeB}
	if err := sw.WriteStrict(ctx, r, a, "a"); err != nil {
		return fmt.Errorf("WriteStrict(%q) under a claim scoped %q refused, want accepted: %w", r, scopeA, err)
	}
	if err := expectState(ctx, s, r, found("a", 5), "after a strict write in scope"); err != nil {
		return err
	}
	var errs []error
	refused := func(res string, c fence.Claim, want resState, when string) {
		err := sw.WriteStrict(ctx, res, c, "out of scope")
		what := fmt.Sprintf("WriteStrict(%q) under a claim scoped %q", res, c.Scope)
		switch {
		case err == nil:
			errs = append(errs, fmt.Errorf("%s accepted, want fence.ErrOutOfScope", what))
			return
		case !errors.Is(err, fence.ErrOutOfScope):
			errs = append(errs, fmt.Errorf("%s: error %q does not match fence.ErrOutOfScope", what, err.Error()))
			return
		case errors.Is(err, fence.ErrStale), errors.Is(err, fence.ErrBusy), errors.Is(err, fence.ErrOutcomeUnknown):
			errs = append(errs, fmt.Errorf("%s: scope error %q also matches stale, busy or outcome unknown", what, err.Error()))
		}
		if se, ok := fence.IsOutOfScope(err); !ok || *se != (fence.ScopeError{Resource: res, Scope: c.Scope}) {
			errs = append(errs, fmt.Errorf("%s: error %q: want a *fence.ScopeError{Resource: %q, Scope: %q}", what, err.Error(), res, c.Scope))
		}
		if err := expectState(ctx, s, res, want, when); err != nil {
			errs = append(errs, err)
		}
	}
	refused(r, b, found("a", 5), "after another key's claim was refused")
	refused(r, fence.Claim{Token: 9}, found("a", 5), "after a claim without a scope was refused")
	refused(r, fence.Claim{Token: 9, Scope: base + "/acme/conv"}, found("a", 5), "after a scope that is a mere text prefix")
	refused(scopeA, fence.Claim{Token: 9, Scope: scopeA}, resState{}, "after a write to the scope itself")
	// The mark did not move: A's token is still admitted.
	if err := sw.WriteStrict(ctx, r, a, "a again"); err != nil {
		errs = append(errs, fmt.Errorf("mark raised by a write refused as out of scope: %w", err))
	} else if err := expectState(ctx, s, r, found("a again", 5), "after A's retry"); err != nil {
		errs = append(errs, err)
	}
	// Malformed scopes are bad input in both modes.
	bad := fence.Claim{Token: 9, Scope: scopeA + "\n"}
	for name, err := range map[string]error{
		"WriteStrict": sw.WriteStrict(ctx, r, bad, "bad"),
		"WriteClaim":  cw.WriteClaim(ctx, r, bad, "bad"),
	} {
		if !errors.Is(err, fence.ErrInvalidScope) {
			errs = append(errs, fmt.Errorf("%s(%q) with a malformed scope: error %s, want fence.ErrInvalidScope", name, r, errText(err)))
		}
	}
	if err := expectState(ctx, s, r, found("a again", 5), "after malformed scopes"); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
