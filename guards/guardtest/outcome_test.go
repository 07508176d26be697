package guardtest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardtest"
)

// fullSubject is every interface FromGuardStrict's Subject implements.
type fullSubject interface {
	guardtest.Subject
	guardtest.ClaimWriter
	guardtest.ContextWriter
	guardtest.FailingWriter
	guardtest.StrictWriter
	guardtest.Fencer
}

// How remoteSubject's guard reports a commit whose reply never came.
const (
	reportUnknown  = "outcome unknown"                    // correct
	reportSettled  = "settled by a read"                  // correct: reads the store, reports success
	reportNothing  = "nothing written"                    // the defect: the context's error alone
	reportNoCause  = "outcome unknown without the cause"  // drops the context's cause
	reportLie      = "success without a read"             // claims success; the hold applied nothing
	reportNoSignal = "hold never reports the commit sent" // the subject's hold is broken
	reportTwice    = "the context's end named twice"      // a message that repeats "fence: context ended"
)

// remoteSubject models a guard whose commit is a request to a server: the
// server (the reference guard over NewMapStore) applies the write under its
// own context, the reply is then held until the client's context ends, and
// the client side reports as report says.
type remoteSubject struct {
	fullSubject
	g      fence.Guard
	store  guardtest.Store
	report string
}

func newRemote(report string) *remoteSubject {
	g, store := newRef(), guardtest.NewMapStore()
	return &remoteSubject{
		fullSubject: guardtest.FromGuardStrict(g, newRefStrict(), store).(fullSubject),
		g:           g, store: store, report: report,
	}
}

func (s *remoteSubject) WriteHeld(ctx context.Context, r string, tok fence.Token, v string, applied func()) error {
	if s.report == reportLie {
		applied()
		<-ctx.Done()
		return nil
	}
	err := s.g.Fence(context.WithoutCancel(ctx), r, tok, func(ctx context.Context) error {
		return s.store.Put(ctx, r, tok, v)
	})
	if err != nil {
		return err // the server's refusal came back
	}
	if s.report == reportNoSignal {
		return nil
	}
	applied()
	<-ctx.Done()
	switch s.report {
	case reportSettled:
		got, gtok, ok, err := s.store.Get(context.WithoutCancel(ctx), r)
		if err == nil && ok && got == v && gtok == tok {
			return nil
		}
		return fence.OutcomeUnknown(ctx, "remote: commit", r, ctx.Err())
	case reportNothing:
		return fence.ContextError(ctx)
	case reportNoCause:
		return fence.OutcomeUnknown(context.WithoutCancel(ctx), "remote: commit", r, ctx.Err())
	case reportTwice:
		return fmt.Errorf("%w: %w", fence.ContextError(ctx), fence.OutcomeUnknown(ctx, "remote: commit", r, ctx.Err()))
	}
	return fence.OutcomeUnknown(ctx, "remote: commit", r, ctx.Err())
}

func TestOutcomeCheck(t *testing.T) {
	cfg := defaults(t)
	for report, want := range map[string]string{
		reportUnknown:  "",
		reportSettled:  "",
		reportNothing:  "does not match fence.ErrOutcomeUnknown: it tells the caller nothing was written",
		reportNoCause:  "does not match context.Canceled and the context's cause",
		reportLie:      `= not found, want {value "held-3", token 3}`,
		reportNoSignal: "without reporting its commit applied",
		reportTwice:    "names the context's end 2 times",
	} {
		t.Run(report, func(t *testing.T) {
			err := guardtest.CheckOutcomeUnknown(context.Background(), newRemote(report), cfg)
			if want == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), want)
		})
	}
	err := guardtest.CheckOutcomeUnknown(context.Background(), newRefSubject(), cfg)
	require.ErrorIs(t, err, guardtest.ErrUnsupported)
}

// untypedScope is a strict guard whose scope refusals are untyped.
type untypedScope struct{ *refGuard }

func (g untypedScope) Fence(ctx context.Context, r string, tok fence.Token, write func(context.Context) error) error {
	if err := g.refGuard.Fence(ctx, r, tok, write); err != nil {
		if errors.Is(err, fence.ErrOutOfScope) {
			return errors.New("out of scope")
		}
		return err
	}
	return nil
}

func TestStrictCheck(t *testing.T) {
	cfg := defaults(t)
	for name, tc := range map[string]struct {
		strict fence.Guard
		want   string
	}{
		"strict":           {newRefStrict(), ""},
		"not strict":       {newRef(), "accepted, want fence.ErrOutOfScope"},
		"untyped refusals": {untypedScope{newRefStrict()}, `does not match fence.ErrOutOfScope`},
	} {
		t.Run(name, func(t *testing.T) {
			err := guardtest.CheckStrictScope(context.Background(), guardtest.FromGuardStrict(newRef(), tc.strict, guardtest.NewMapStore()), cfg)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	// A guard that does not validate scopes fails on the malformed one.
	err := guardtest.CheckStrictScope(context.Background(), guardtest.FromGuardStrict(newBuggy(bugs{}), newRefStrict(), guardtest.NewMapStore()), cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "WriteClaim")
	assert.Contains(t, err.Error(), "want fence.ErrInvalidScope")
}

// reportReapplied makes remoteSubject's WriteDelayed apply the held copy
// when it is delivered, as a store that compares a write id only with the
// mark's current one does: the defect CheckDelayedDuplicate finds.
const reportReapplied = "held copy applied on delivery"

// WriteDelayed models a client that re-sends the held request: the second
// copy is applied and acknowledged. The server consumes each write id once,
// so the first copy, delivered later, is a no-op (unless report is
// reportReapplied).
func (s *remoteSubject) WriteDelayed(ctx context.Context, r string, c fence.Claim, v string) (func(context.Context) error, error) {
	apply := func(ctx context.Context) error {
		return s.g.Fence(fence.WithClaim(ctx, c), r, c.Token, func(ctx context.Context) error {
			return s.store.Put(ctx, r, c.Token, v)
		})
	}
	err := apply(ctx)
	return func(ctx context.Context) error {
		switch s.report {
		case reportReapplied:
			_ = apply(ctx) // the store's verdict on the late copy reaches nobody
		case reportStaleApplied:
			return s.store.Put(ctx, r, c.Token, v) // past the guard: whatever the mark is now
		}
		return nil
	}, err
}

func TestDelayedDuplicateCheck(t *testing.T) {
	cfg := defaults(t)
	require.NoError(t, guardtest.CheckDelayedDuplicate(context.Background(), newRemote(reportUnknown), cfg))
	err := guardtest.CheckDelayedDuplicate(context.Background(), newRemote(reportReapplied), cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "a delayed copy of an earlier write was applied after a later write")
	err = guardtest.CheckDelayedDuplicate(context.Background(), newRefSubject(), cfg)
	require.ErrorIs(t, err, guardtest.ErrUnsupported)
}
