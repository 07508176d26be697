package guardtest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/fencekit/fencekit/fence"
)

// OutcomeWriter is implemented by Subjects that can hold back the store's
// reply to the request that commits a write: the COMMIT of pgguard's
// transaction, the conditional PUT of s3guard, the HTTP request of
// httpguard's client. WriteHeld performs Write(ctx, resource, token, value),
// except that the reply to its committing request is withheld (by a TCP
// proxy, an http.RoundTripper or the server itself) until ctx ends. Once the
// store has applied that request — its reply exists but has not reached the
// guard — WriteHeld calls applied, from any goroutine, once; the check then
// ends ctx, so the guard sees its context end with the write applied and
// the reply in flight. WriteHeld returns what the guard returned, after
// releasing the hold.
//
// checkLinearizable calls WriteHeld from several goroutines at once, for
// different resources: the hold must catch each call's own reply.
//
// Every guard whose commit is a request over a network should implement it;
// in-process guards (memguard) cannot. The check is skipped, and logged,
// for a Subject without it.
type OutcomeWriter interface {
	WriteHeld(ctx context.Context, resource string, token fence.Token, value string, applied func()) error
}

// interfaceOutcomeWriter names OutcomeWriter in messages.
const interfaceOutcomeWriter = "OutcomeWriter"

// checkOutcomeUnknown checks what a guard reports when its context ends
// while its committing request is in flight and has in fact been applied,
// on a written and on a fresh resource: never "nothing written". It must
// either settle the outcome (return nil: the write was applied) or return
// an error matching fence.ErrOutcomeUnknown, context.Canceled and the
// context's cause (and neither fence.ErrBusy nor fence.ErrStale). Read then
// returns the write, and a retry under the same token is accepted, as
// docs/guards.md tells callers to do after an unknown outcome. Needs an
// OutcomeWriter.
func checkOutcomeUnknown(ctx context.Context, s Subject, cfg Config) error {
	ow, ok := s.(OutcomeWriter)
	if !ok {
		return &unsupportedError{Interface: interfaceOutcomeWriter}
	}
	r := resourceName(cfg, "outcome", 0)
	fresh := resourceName(cfg, "outcome", 1)
	if err := mustAccept(ctx, s, r, 5, "five"); err != nil {
		return err
	}
	var errs []error
	for _, step := range []struct {
		r   string
		tok fence.Token
	}{{r, 6}, {fresh, 3}} {
		if err := checkHeld(ctx, s, ow, step.r, step.tok); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func checkHeld(ctx context.Context, s Subject, ow OutcomeWriter, r string, tok fence.Token) error {
	v := fmt.Sprintf("held-%d", tok)
	cause := fmt.Errorf("guardtest: lease taken over while the commit was in flight (test cause %p)", new(int))
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var applied atomic.Bool
	err := ow.WriteHeld(wctx, r, tok, v, func() {
		applied.Store(true)
		cancel(cause)
	})
	what := fmt.Sprintf("WriteHeld(%q, token %d)", r, tok)
	if !applied.Load() {
		return fmt.Errorf("%s returned %s without reporting its commit applied: the subject's hold never caught the committing request's reply", what, errText(err))
	}
	var errs []error
	switch {
	case err == nil:
		// The guard settled the outcome: applied, and it says so.
	case !errors.Is(err, fence.ErrOutcomeUnknown):
		errs = append(errs, fmt.Errorf("%s: the commit was applied and its reply held until the context ended, but the error %q does not match fence.ErrOutcomeUnknown: it tells the caller nothing was written", what, err.Error()))
	case !errors.Is(err, context.Canceled) || !errors.Is(err, cause):
		errs = append(errs, fmt.Errorf("%s: outcome-unknown error %q does not match context.Canceled and the context's cause", what, err.Error()))
	case errors.Is(err, fence.ErrBusy), errors.Is(err, fence.ErrStale):
		errs = append(errs, fmt.Errorf("%s: outcome-unknown error %q also matches fence.ErrBusy or fence.ErrStale", what, err.Error()))
	default:
		if err := checkNamedOnce(err, what); err != nil {
			errs = append(errs, err)
		}
	}
	if err := expectState(ctx, s, r, found(v, tok), "after a write whose commit was applied while its reply was held"); err != nil {
		errs = append(errs, err)
	}
	// After an unknown outcome, retrying under the same token is admitted
	// whether or not the first attempt landed.
	if err := mustAccept(ctx, s, r, tok, v+" again"); err != nil {
		errs = append(errs, fmt.Errorf("retry with the same token after an unknown outcome: %w", err))
	} else if err := expectState(ctx, s, r, found(v+" again", tok), "after the retry"); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
