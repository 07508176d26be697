package guardtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/fencekit/fencekit/fence"
)

// ClaimWriter is implemented by Subjects that can present a full claim (a
// token and a run identity) explicitly. WriteClaim performs one guarded write
// of value to resource under c, like Write under c.Token, except that the
// guard also sees c.Run: it must refuse a write whose token equals the
// resource's mark while its run differs from the run that set the mark, with
// an error matching fence.ErrTokenReused (a *fence.ReusedError), and a
// malformed run with an error matching fence.ErrInvalidRun.
type ClaimWriter interface {
	WriteClaim(ctx context.Context, resource string, c fence.Claim, value string) error
}

// ContextWriter is implemented by Subjects that drive the guard's ctx-first
// form: WriteContext performs one guarded write of value to resource under
// the claim ctx carries (fence.ClaimFromContext). With no claim in ctx it
// must return an error matching fence.ErrNoToken and write nothing.
type ContextWriter interface {
	WriteContext(ctx context.Context, resource, value string) error
}

// Names of the optional interfaces that Config.Pending may list.
const (
	InterfaceClaimWriter   = "ClaimWriter"
	InterfaceContextWriter = "ContextWriter"
)

// unsupportedError is returned by a check that needs an optional interface
// the Subject does not implement. It matches ErrUnsupported.
type unsupportedError struct {
	Interface string // "FailingWriter", "ClaimWriter", "ContextWriter", "OutcomeWriter" or "StrictWriter"
}

func (e *unsupportedError) Error() string {
	return fmt.Sprintf("guardtest: subject does not implement guardtest.%s", e.Interface)
}

// Is reports whether target is ErrUnsupported.
func (e *unsupportedError) Is(target error) bool { return target == ErrUnsupported }

// required reports whether Run fails (rather than skips) a check that
// returned err: an unsupported required interface not listed as pending.
func (cfg Config) required(err error) (iface string, req bool) {
	var ue *unsupportedError
	if !errors.As(err, &ue) {
		return "", false
	}
	switch ue.Interface {
	case InterfaceClaimWriter, InterfaceContextWriter, InterfaceStrictWriter:
		return ue.Interface, !slices.Contains(cfg.Pending, ue.Interface)
	}
	return ue.Interface, false
}

// Run identities the claim checks use.
const (
	runA = "run-a.0001"
	runB = "run-b.0002"
)

// endedContext returns a context cancelled with a cause of its own.
func endedContext(ctx context.Context) (context.Context, error) {
	cause := fmt.Errorf("guardtest: lease lost (test cause %p)", new(int))
	ctx, cancel := context.WithCancelCause(ctx)
	cancel(cause)
	return ctx, cause
}

// checkEndedErr verifies the error of a write under an ended context.
func checkEndedErr(err, cause error, what string) error {
	switch {
	case err == nil:
		return fmt.Errorf("%s under a cancelled context accepted, want an error matching context.Canceled and the cause", what)
	case errors.Is(err, fence.ErrBusy):
		return fmt.Errorf("%s under a cancelled context: error %q matches fence.ErrBusy (retrying cannot help once the context ended)", what, err.Error())
	case !errors.Is(err, context.Canceled):
		return fmt.Errorf("%s under a cancelled context: error %q does not match context.Canceled", what, err.Error())
	case !errors.Is(err, cause):
		return fmt.Errorf("%s under a cancelled context: error %q does not match the context's cause (context.Cause)", what, err.Error())
	case errors.Is(err, fence.ErrStale):
		return fmt.Errorf("%s under a cancelled context: error %q matches fence.ErrStale", what, err.Error())
	case errors.Is(err, fence.ErrOutcomeUnknown):
		return fmt.Errorf("%s under a context cancelled before the call: error %q matches fence.ErrOutcomeUnknown, but nothing can have been sent", what, err.Error())
	}
	return checkNamedOnce(err, what)
}

// checkNamedOnce verifies that an error names the context's end at most
// once (fence.WrapContext over fence.ContextError must not repeat it).
func checkNamedOnce(err error, what string) error {
	if n := strings.Count(err.Error(), "fence: context ended"); n > 1 {
		return fmt.Errorf("%s: error %q names the context's end %d times", what, err.Error(), n)
	}
	return nil
}

// checkEnded runs write under an ended context on a written and on a fresh
// resource and requires the cancellation error, no state change and no mark
// raised.
func checkEnded(ctx context.Context, s Subject, cfg Config, name string,
	write func(ctx context.Context, r string, tok fence.Token, v string) error) error {
	r := resourceName(cfg, name, 0)
	fresh := resourceName(cfg, name, 1)
	if err := mustAccept(ctx, s, r, 5, "five"); err != nil {
		return err
	}
	ended, cause := endedContext(ctx)
	var errs []error
	for _, res := range []string{r, fresh} {
		if err := checkEndedErr(write(ended, res, 6, "ended"), cause, fmt.Sprintf("write(%q, token 6)", res)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := expectState(ctx, s, r, found("five", 5), "after a write under a cancelled context"); err != nil {
		errs = append(errs, err)
	}
	if err := expectState(ctx, s, fresh, resState{}, "after a write under a cancelled context on a fresh resource"); err != nil {
		errs = append(errs, err)
	}
	// The mark was not raised: token 5 is still admitted.
	if err := mustAccept(ctx, s, r, 5, "again"); err != nil {
		errs = append(errs, fmt.Errorf("mark raised by a write under a cancelled context: %w", err))
	}
	if err := mustAccept(ctx, s, fresh, 1, "one"); err != nil {
		errs = append(errs, fmt.Errorf("mark created by a write under a cancelled context: %w", err))
	}
	return errors.Join(errs...)
}

// checkEndedContext checks that Write under a context that was cancelled
// with a cause (as a lease context is when the lease is lost) returns an
// error matching both context.Canceled and the cause, never fence.ErrBusy,
// and changes neither the value nor the mark.
func checkEndedContext(ctx context.Context, s Subject, cfg Config) error {
	return checkEnded(ctx, s, cfg, "ended", s.Write)
}

// checkEndedContextForm is checkEndedContext for the ctx-first form: the
// cancelled context carries a valid claim. Needs a ContextWriter.
func checkEndedContextForm(ctx context.Context, s Subject, cfg Config) error {
	cw, ok := s.(ContextWriter)
	if !ok {
		return &unsupportedError{Interface: InterfaceContextWriter}
	}
	return checkEnded(ctx, s, cfg, "endedctx", func(ctx context.Context, r string, tok fence.Token, v string) error {
		return cw.WriteContext(fence.WithClaim(ctx, fence.Claim{Token: tok}), r, v)
	})
}

// checkNoToken checks that the ctx-first form refuses a context that
// carries no claim with an error matching fence.ErrNoToken and writes
// nothing, on a written and on a fresh resource. Needs a ContextWriter.
func checkNoToken(ctx context.Context, s Subject, cfg Config) error {
	cw, ok := s.(ContextWriter)
	if !ok {
		return &unsupportedError{Interface: InterfaceContextWriter}
	}
	r := resourceName(cfg, "notoken", 0)
	fresh := resourceName(cfg, "notoken", 1)
	if err := mustAccept(ctx, s, r, 5, "five"); err != nil {
		return err
	}
	var errs []error
	for _, res := range []string{r, fresh} {
		err := cw.WriteContext(ctx, res, "no token")
		switch {
		case err == nil:
			errs = append(errs, fmt.Errorf("WriteContext(%q) without a claim accepted, want fence.ErrNoToken", res))
		case !errors.Is(err, fence.ErrNoToken):
			errs = append(errs, fmt.Errorf("WriteContext(%q) without a claim: error %q does not match fence.ErrNoToken", res, err.Error()))
		case errors.Is(err, fence.ErrStale), errors.Is(err, fence.ErrBusy):
			errs = append(errs, fmt.Errorf("WriteContext(%q) without a claim: error %q also matches stale or busy", res, err.Error()))
		}
	}
	if err := expectState(ctx, s, r, found("five", 5), "after WriteContext without a claim"); err != nil {
		errs = append(errs, err)
	}
	if err := expectState(ctx, s, fresh, resState{}, "after WriteContext without a claim on a fresh resource"); err != nil {
		errs = append(errs, err)
	}
	if err := mustAccept(ctx, s, fresh, 1, "one"); err != nil {
		errs = append(errs, fmt.Errorf("mark created by WriteContext without a claim: %w", err))
	}
	return errors.Join(errs...)
}

// checkContextForm checks that the ctx-first form under fence.WithClaim
// admits and refuses exactly like Write: first, higher and equal tokens
// accepted, lower ones refused with a *fence.StaleError, marks shared with
// Write in both directions, an invalid claim or resource refused with the
// typed error, and a claim whose token equals the mark while its run differs
// from the mark's refused as a reuse. Needs a ContextWriter.
func checkContextForm(ctx context.Context, s Subject, cfg Config) error {
	cw, ok := s.(ContextWriter)
	if !ok {
		return &unsupportedError{Interface: InterfaceContextWriter}
	}
	accept := func(r string, tok fence.Token, v string) error {
		if err := cw.WriteContext(fence.WithClaim(ctx, fence.Claim{Token: tok}), r, v); err != nil {
			return fmt.Errorf("WriteContext(%q) under token %d refused, want accepted: %w", r, tok, err)
		}
		return expectState(ctx, s, r, found(v, tok), fmt.Sprintf("after WriteContext under token %d", tok))
	}
	r := resourceName(cfg, "ctxform", 0)
	for _, step := range []struct {
		tok fence.Token
		v   string
	}{{10, "ten"}, {10, "ten again"}, {12, "twelve"}} {
		if err := accept(r, step.tok, step.v); err != nil {
			return err
		}
	}
	if err := checkStaleErr(cw.WriteContext(fence.WithClaim(ctx, fence.Claim{Token: 11}), r, "eleven"), r, 11, 12); err != nil {
		return fmt.Errorf("WriteContext: %w", err)
	}
	if err := expectState(ctx, s, r, found("twelve", 12), "after a stale WriteContext"); err != nil {
		return err
	}
	// Write and WriteContext share the mark.
	if err := mustAccept(ctx, s, r, 20, "twenty"); err != nil {
		return err
	}
	if err := checkStaleErr(cw.WriteContext(fence.WithClaim(ctx, fence.Claim{Token: 19}), r, "nineteen"), r, 19, 20); err != nil {
		return fmt.Errorf("WriteContext after Write: %w", err)
	}
	if err := accept(r, 21, "twenty-one"); err != nil {
		return err
	}
	if err := checkStaleErr(s.Write(ctx, r, 20, "twenty"), r, 20, 21); err != nil {
		return fmt.Errorf("Write after WriteContext: %w", err)
	}
	// Bad input through the context.
	var errs []error
	for _, bad := range []struct {
		c    fence.Claim
		want error
	}{{fence.Claim{Token: 0}, fence.ErrInvalidToken}, {fence.Claim{Token: -4}, fence.ErrInvalidToken},
		{fence.Claim{Token: 30, Run: "bad run"}, fence.ErrInvalidRun}} {
		err := cw.WriteContext(fence.WithClaim(ctx, bad.c), r, "bad")
		if !errors.Is(err, bad.want) {
			errs = append(errs, fmt.Errorf("WriteContext(%q) under claim %+v: error %s, want %s", r, bad.c, errText(err), errText(bad.want)))
		}
	}
	for _, name := range invalidResources() {
		if err := cw.WriteContext(fence.WithClaim(ctx, fence.Claim{Token: 30}), name, "bad"); !errors.Is(err, fence.ErrInvalidResource) {
			errs = append(errs, fmt.Errorf("WriteContext(%q): error %s, want fence.ErrInvalidResource", name, errText(err)))
		}
	}
	if err := expectState(ctx, s, r, found("twenty-one", 21), "after bad WriteContext input"); err != nil {
		errs = append(errs, err)
	}
	// Reuse through the context: run A sets the mark, run B's equal token
	// is refused.
	r2 := resourceName(cfg, "ctxform", 1)
	if err := cw.WriteContext(fence.WithClaim(ctx, fence.Claim{Token: 7, Run: runA}), r2, "a"); err != nil {
		errs = append(errs, fmt.Errorf("WriteContext(%q) under token 7 of run A refused: %w", r2, err))
	} else if err := checkReusedErr(cw.WriteContext(fence.WithClaim(ctx, fence.Claim{Token: 7, Run: runB}), r2, "b"), r2, 7, runB, runA); err != nil {
		errs = append(errs, fmt.Errorf("WriteContext: %w", err))
	}
	if err := expectState(ctx, s, r2, found("a", 7), "after a reused token through WriteContext"); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// checkReusedErr verifies err is a reuse refusal with the given fields.
func checkReusedErr(err error, r string, tok fence.Token, run, markRun string) error {
	what := fmt.Sprintf("write(%q, token %d, run %q) over a mark set by run %q", r, tok, run, markRun)
	if err == nil {
		return fmt.Errorf("%s accepted, want fence.ErrTokenReused", what)
	}
	if !errors.Is(err, fence.ErrTokenReused) {
		return fmt.Errorf("%s: error %q does not match fence.ErrTokenReused", what, err.Error())
	}
	if errors.Is(err, fence.ErrStale) || errors.Is(err, fence.ErrBusy) {
		return fmt.Errorf("%s: reuse error %q also matches stale or busy", what, err.Error())
	}
	re, ok := fence.IsReused(err)
	if !ok {
		return fmt.Errorf("%s: error %q matches ErrTokenReused but errors.As *fence.ReusedError fails", what, err.Error())
	}
	want := fence.ReusedError{Resource: r, Token: tok, Run: run, MarkRun: markRun}
	if *re != want {
		return fmt.Errorf("%s: %+v, want %+v", what, *re, want)
	}
	return nil
}

// checkTokenReuse checks the run-identity rule with explicit claims: with
// the mark set by run A at token T, T from run B is refused with a
// *fence.ReusedError (not stale, not busy) and changes nothing; T from A is
// accepted; T with no run is accepted (token-only rule) and keeps A's
// identity, so B is still refused; T+1 from B is accepted and hands the
// identity to B; a malformed run is refused with fence.ErrInvalidRun and
// writes nothing. Needs a ClaimWriter.
func checkTokenReuse(ctx context.Context, s Subject, cfg Config) error {
	cw, ok := s.(ClaimWriter)
	if !ok {
		return &unsupportedError{Interface: InterfaceClaimWriter}
	}
	const T = fence.Token(7)
	r := resourceName(cfg, "reuse", 0)
	claim := func(tok fence.Token, run string) fence.Claim { return fence.Claim{Token: tok, Run: run} }
	accept := func(c fence.Claim, v string) error {
		if err := cw.WriteClaim(ctx, r, c, v); err != nil {
			return fmt.Errorf("WriteClaim(%q, %+v) refused, want accepted: %w", r, c, err)
		}
		return expectState(ctx, s, r, found(v, c.Token), fmt.Sprintf("after WriteClaim %+v", c))
	}
	reused := func(c fence.Claim, markRun string, want resState) error {
		if err := checkReusedErr(cw.WriteClaim(ctx, r, c, "reused"), r, c.Token, c.Run, markRun); err != nil {
			return err
		}
		return expectState(ctx, s, r, want, fmt.Sprintf("after a reused WriteClaim %+v", c))
	}
	if err := accept(claim(T, runA), "a1"); err != nil {
		return err
	}
	if err := reused(claim(T, runB), runA, found("a1", T)); err != nil {
		return err
	}
	if err := accept(claim(T, runA), "a2"); err != nil {
		return fmt.Errorf("the run that set the mark: %w", err)
	}
	if err := accept(claim(T, ""), "no run"); err != nil {
		return fmt.Errorf("token-only rule: %w", err)
	}
	if err := reused(claim(T, runB), runA, found("no run", T)); err != nil {
		return fmt.Errorf("a write without a run must keep the mark's run: %w", err)
	}
	if err := mustAccept(ctx, s, r, T, "plain"); err != nil {
		return fmt.Errorf("Write (no run) at the mark: %w", err)
	}
	if err := accept(claim(T+1, runB), "b"); err != nil {
		return fmt.Errorf("a higher token from another run: %w", err)
	}
	if err := reused(claim(T+1, runA), runB, found("b", T+1)); err != nil {
		return fmt.Errorf("the mark's run moves with the token: %w", err)
	}
	if err := checkStaleErr(cw.WriteClaim(ctx, r, claim(T, runA), "stale"), r, T, T+1); err != nil {
		return fmt.Errorf("WriteClaim: %w", err)
	}
	// Malformed run identities change nothing, on a written and a fresh
	// resource; the mark is not raised.
	fresh := resourceName(cfg, "reuse", 1)
	var errs []error
	for _, bad := range []string{"has space", "semi;colon", "nul\x00", "ünï", string(make([]byte, fence.MaxRunLen+1))} {
		for _, res := range []string{r, fresh} {
			err := cw.WriteClaim(ctx, res, claim(T+5, bad), "bad run")
			if !errors.Is(err, fence.ErrInvalidRun) {
				errs = append(errs, fmt.Errorf("WriteClaim(%q) with run %q: error %s, want fence.ErrInvalidRun", res, bad, errText(err)))
			}
		}
	}
	if err := expectState(ctx, s, r, found("b", T+1), "after malformed runs"); err != nil {
		errs = append(errs, err)
	}
	if err := expectState(ctx, s, fresh, resState{}, "after malformed runs on a fresh resource"); err != nil {
		errs = append(errs, err)
	}
	if err := mustAccept(ctx, s, r, T+1, "b again"); err != nil {
		errs = append(errs, fmt.Errorf("mark raised by a malformed run: %w", err))
	}
	return errors.Join(errs...)
}

// errText formats an error that a check reports without wrapping it.
func errText(err error) string {
	if err == nil {
		return "nil"
	}
	return fmt.Sprintf("%q", err.Error())
}
