package guardtest

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/fence"
)

// Fencer is implemented by Subjects that expose the fence.Guard their
// writes go through (every fencekit guard is one; FromGuard's Subjects
// implement it). A nil Guard counts as not implemented. checkFenceClaim and checkFenceMissing call its Fence (and
// Do, when it is a ContextGuard) with callbacks that write nothing
// themselves; Read must then see what the guard alone did.
type Fencer interface {
	Guard() fence.Guard
}

// interfaceFencer names Fencer in messages.
const interfaceFencer = "Fencer"

// checkFenceClaim checks that a Fence callback's context carries the
// admitted claim (fence.ClaimFromContext): the token Fence was given, with
// the run and scope of ctx's claim when that claim is for the same token,
// and no run otherwise; and, for a ContextGuard, that Do's callback sees
// ctx's claim. Needs a Fencer.
func checkFenceClaim(ctx context.Context, s Subject, cfg Config) error {
	g := fencerGuard(s)
	if g == nil {
		return &unsupportedError{Interface: interfaceFencer}
	}
	r := resourceName(cfg, "fenceclaim", 0)
	var errs []error
	check := func(call string, want fence.Claim, run func(write func(context.Context) error) error) {
		var got fence.Claim
		var gerr error
		called := false
		err := run(func(ctx context.Context) error {
			called = true
			got, gerr = fence.ClaimFromContext(ctx)
			return nil
		})
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s on %q: %w", call, r, err))
		case !called:
			errs = append(errs, fmt.Errorf("%s on %q returned nil without calling write", call, r))
		case gerr != nil:
			errs = append(errs, fmt.Errorf("%s on %q: fence.ClaimFromContext in write: %w, want claim %+v", call, r, gerr, want))
		case got != want:
			errs = append(errs, fmt.Errorf("%s on %q: fence.ClaimFromContext in write = %+v, want %+v", call, r, got, want))
		}
	}
	check("Fence(token 3) with no claim in ctx", fence.Claim{Token: 3}, func(w func(context.Context) error) error {
		return g.Fence(ctx, r, 3, w)
	})
	withRun := fence.Claim{Token: 4, Run: runA}
	check("Fence(token 4) with ctx's claim for token 4", withRun, func(w func(context.Context) error) error {
		return g.Fence(fence.WithClaim(ctx, withRun), r, 4, w)
	})
	check("Fence(token 5) with ctx's claim for token 9", fence.Claim{Token: 5}, func(w func(context.Context) error) error {
		return g.Fence(fence.WithClaim(ctx, fence.Claim{Token: 9, Run: runB}), r, 5, w)
	})
	if cg, ok := g.(ContextGuard); ok {
		c := fence.Claim{Token: 6, Run: runA}
		check("Do under ctx's claim for token 6", c, func(w func(context.Context) error) error {
			return cg.Do(fence.WithClaim(ctx, c), r, w)
		})
	}
	return errors.Join(errs...)
}

// checkFenceMissing checks the rule for a Fence whose callback writes
// nothing on a resource never written: it succeeds and raises the mark
// (a lower token is then refused as stale, the same token accepted), and
// no value appears (Read finds none). Needs a Fencer.
func checkFenceMissing(ctx context.Context, s Subject, cfg Config) error {
	g := fencerGuard(s)
	if g == nil {
		return &unsupportedError{Interface: interfaceFencer}
	}
	r := resourceName(cfg, "fencemissing", 0)
	if err := g.Fence(ctx, r, 5, func(context.Context) error { return nil }); err != nil {
		return fmt.Errorf("Fence(%q, token 5) writing nothing on a missing resource: %w", r, err)
	}
	if err := expectState(ctx, s, r, resState{}, "after a Fence that wrote nothing"); err != nil {
		return err
	}
	if err := checkStaleErr(s.Write(ctx, r, 4, "four"), r, 4, 5); err != nil {
		return fmt.Errorf("after a Fence that wrote nothing under token 5: %w", err)
	}
	if err := expectState(ctx, s, r, resState{}, "after a stale write"); err != nil {
		return err
	}
	if err := mustAccept(ctx, s, r, 5, "five"); err != nil {
		return err
	}
	return expectState(ctx, s, r, found("five", 5), "after token 5")
}

// fencerGuard returns s's guard, or nil.
func fencerGuard(s Subject) fence.Guard {
	if f, ok := s.(Fencer); ok {
		return f.Guard()
	}
	return nil
}
