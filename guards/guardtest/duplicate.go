package guardtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// DuplicateWriter is implemented by Subjects whose committing request can
// reach the store twice: a client that re-sends a request on its own after a
// read timeout (go-redis), an SDK that retries on network errors (S3, GCS), a
// publish re-sent within a duplicate window (NATS), a driver that re-runs a
// statement whose reply was lost.
//
// WriteDelayed performs WriteClaim(ctx, resource, c, value), except that the
// subject holds the FIRST copy of the write's committing request in transit,
// as a network that delays one packet past the client's read timeout would.
// Every later copy (the client's or the guard's own retries, the guard's
// settling reads) goes through. WriteDelayed returns what the guard returned
// and a deliver function that sends the held copy on to the store and
// returns once the store has answered it or closed its connection. The kit
// calls deliver exactly once. When the guard sent no committing request at
// all (it refused the write from a read before committing), deliver returns
// an error matching ErrNothingHeld; the kit accepts that only for a write
// that was refused (stale, reused or busy), never for one that reported
// success, an unknown outcome or "not applied".
//
// checkLinearizable calls WriteDelayed from several goroutines at once, for
// different resources, and delivers each held copy while other writes go
// on (it takes a resource's next faulted write only after delivering).
//
// The check is skipped, and logged, for a Subject without it; every guard
// whose store client can re-send a request should implement it.
type DuplicateWriter interface {
	WriteDelayed(ctx context.Context, resource string, c fence.Claim, value string) (deliver func(context.Context) error, err error)
}

// ErrNothingHeld is matched by the error of a DuplicateWriter's deliver
// function when the write sent no committing request, so no copy was held.
var ErrNothingHeld = errors.New("guardtest: no committing request was held")

// interfaceDuplicateWriter names DuplicateWriter in messages.
const interfaceDuplicateWriter = "DuplicateWriter"

// delayedWriteTimeout bounds the context of the delayed write in
// checkDelayedDuplicate: a guard that neither retries nor settles returns
// when it ends.
const delayedWriteTimeout = 3 * time.Second

// checkDelayedDuplicate checks that a delayed copy of an earlier write of a
// run can never be applied after a later write of the same run: with the
// mark at (5, run A), a write of "first" under (5, A) whose first request is
// held in transit returns nil, an error matching fence.ErrOutcomeUnknown or
// one matching fence.ErrNotApplied; a later write of "later" under (5, A)
// is accepted; the held copy is then delivered; and Read still returns
// "later" at token 5. The same holds when the later write comes from a newer
// run (6, B). Needs a DuplicateWriter and a ClaimWriter.
func checkDelayedDuplicate(ctx context.Context, s Subject, cfg Config) error {
	dw, ok := s.(DuplicateWriter)
	if !ok {
		return &unsupportedError{Interface: interfaceDuplicateWriter}
	}
	cw, ok := s.(ClaimWriter)
	if !ok {
		return &unsupportedError{Interface: InterfaceClaimWriter}
	}
	var errs []error
	for i, later := range []fence.Claim{{Token: 5, Run: runA}, {Token: 6, Run: runB}} {
		if err := checkDelayed(ctx, s, dw, cw, resourceName(cfg, "delayed", i), later); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func checkDelayed(ctx context.Context, s Subject, dw DuplicateWriter, cw ClaimWriter, r string, later fence.Claim) error {
	first := fence.Claim{Token: 5, Run: runA}
	if err := cw.WriteClaim(ctx, r, first, "base"); err != nil {
		return fmt.Errorf("WriteClaim(%q, token 5, run A) refused, want accepted: %w", r, err)
	}
	wctx, cancel := context.WithTimeout(ctx, delayedWriteTimeout)
	deliver, err := dw.WriteDelayed(wctx, r, first, "first")
	cancel()
	what := fmt.Sprintf("WriteDelayed(%q, token 5, run A)", r)
	var errs []error
	switch {
	case deliver == nil:
		return fmt.Errorf("%s returned no deliver function (error %s)", what, errText(err))
	case err == nil, errors.Is(err, fence.ErrOutcomeUnknown), errors.Is(err, fence.ErrNotApplied):
	default:
		errs = append(errs, fmt.Errorf("%s: error %q matches neither fence.ErrOutcomeUnknown nor fence.ErrNotApplied: its request was sent", what, err.Error()))
	}
	// The later write runs while the first copy is still held. A store that
	// serialises the two (a row lock) may make it wait for the held copy:
	// deliver it after the later write returned, or after a grace period.
	done := make(chan error, 1)
	go func() { done <- cw.WriteClaim(ctx, r, later, "later") }()
	var laterErr error
	delivered := false
	select {
	case laterErr = <-done:
	case <-time.After(2 * time.Second):
		delivered = true
		if err := deliver(ctx); err != nil {
			errs = append(errs, fmt.Errorf("delivering the held copy: %w", err))
		}
		laterErr = <-done
	}
	if !delivered {
		if err := deliver(ctx); err != nil {
			errs = append(errs, fmt.Errorf("delivering the held copy: %w", err))
		}
	}
	if laterErr != nil {
		errs = append(errs, fmt.Errorf("WriteClaim(%q, token %d, run %s) after the delayed write refused, want accepted: %w", r, later.Token, later.Run, laterErr))
		return errors.Join(errs...)
	}
	if err := expectState(ctx, s, r, found("later", later.Token), "after the held first copy of an earlier write was delivered"); err != nil {
		errs = append(errs, fmt.Errorf("a delayed copy of an earlier write was applied after a later write: %w", err))
	}
	return errors.Join(errs...)
}

// CheckFaultWritersConcurrent runs checkDelayedDuplicate and
// checkOutcomeUnknown from Writers goroutines at once (half each), on
// resources of their own, and joins their errors: a Subject's
// DuplicateWriter and OutcomeWriter must give each call the outcome it has
// alone (a hold shared between calls shows here). Needs both interfaces.
func CheckFaultWritersConcurrent(ctx context.Context, s Subject, cfg Config) error {
	n := max(cfg.Writers, 2)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		check := checkDelayedDuplicate
		if i%2 == 1 {
			check = checkOutcomeUnknown
		}
		wg.Go(func() { errs[i] = check(ctx, s, cfg) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
