package guardtest_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// refGuard is a minimal correct guard: one mutex around decide, write, raise,
// with run identities (fence.DecideClaim, fence.NextMark) and a ctx-first
// form (Do).
type refGuard struct {
	mu     sync.Mutex
	marks  map[string]fence.Token
	runs   map[string]string
	strict bool // refuse resources outside the claim's scope (fence.CheckScope)
	// plainCtx hands write the caller's ctx, without the admitted claim
	// (a broken guard for CheckFenceClaim).
	plainCtx bool
}

func newRef() *refGuard { return &refGuard{marks: map[string]fence.Token{}, runs: map[string]string{}} }

func newRefStrict() *refGuard { g := newRef(); g.strict = true; return g }

// newRefSubject is the reference Subject: the reference guard, a strict
// one for the scope check, over one store.
func newRefSubject() guardtest.Subject {
	return guardtest.FromGuardStrict(newRef(), newRefStrict(), guardtest.NewMapStore())
}

func (g *refGuard) Fence(ctx context.Context, r string, tok fence.Token, write func(context.Context) error) error {
	return g.fenceClaim(ctx, r, fence.ClaimFor(ctx, tok), write)
}

func (g *refGuard) Do(ctx context.Context, r string, write func(context.Context) error) error {
	c, err := fence.ClaimFromContext(ctx)
	if err != nil {
		return err
	}
	return g.fenceClaim(ctx, r, c, write)
}

func (g *refGuard) fenceClaim(ctx context.Context, r string, c fence.Claim, write func(context.Context) error) error {
	if err := fence.ValidateResource(r); err != nil {
		return err
	}
	if err := c.Validate(); err != nil {
		return err
	}
	if g.strict {
		if err := fence.CheckScope(r, c); err != nil {
			return err
		}
	}
	if err := fence.ContextError(ctx); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := fence.DecideClaim(r, c, g.marks[r], g.runs[r]); err != nil {
		return err
	}
	wctx := fence.WithClaim(ctx, c)
	if g.plainCtx {
		wctx = ctx
	}
	if err := write(wctx); err != nil {
		return err
	}
	g.marks[r], g.runs[r] = fence.NextMark(c, g.marks[r], g.runs[r])
	return nil
}

// acceptAll never refuses a token (but validates arguments).
type acceptAll struct{}

func (acceptAll) Fence(ctx context.Context, r string, tok fence.Token, write func(context.Context) error) error {
	if err := fence.CheckArgs(r, tok); err != nil {
		return err
	}
	return write(ctx)
}

// checkThenWrite decides under the lock, releases it, then writes and
// raises the mark: the two-winners bug.
type checkThenWrite struct{ refGuard }

func (g *checkThenWrite) Fence(ctx context.Context, r string, tok fence.Token, write func(context.Context) error) error {
	if err := fence.CheckArgs(r, tok); err != nil {
		return err
	}
	g.mu.Lock()
	err := fence.Decide(r, tok, g.marks[r])
	g.mu.Unlock()
	if err != nil {
		return err
	}
	runtime.Gosched()
	if err := write(ctx); err != nil {
		return err
	}
	g.mu.Lock()
	g.marks[r] = tok // not even max: a late low write lowers the mark
	g.mu.Unlock()
	return nil
}

// checkThenWriteMax is checkThenWrite that raises the mark with max, so
// later low tokens are refused; only reads (and the final state) show that
// an admitted low write overwrote a newer value.
type checkThenWriteMax struct{ refGuard }

func (g *checkThenWriteMax) Fence(ctx context.Context, r string, tok fence.Token, write func(context.Context) error) error {
	if err := fence.CheckArgs(r, tok); err != nil {
		return err
	}
	g.mu.Lock()
	err := fence.Decide(r, tok, g.marks[r])
	g.mu.Unlock()
	if err != nil {
		return err
	}
	runtime.Gosched()
	if err := write(ctx); err != nil {
		return err
	}
	g.mu.Lock()
	g.marks[r] = max(g.marks[r], tok)
	g.mu.Unlock()
	return nil
}

// raiseOnFailure raises the mark even when write fails.
type raiseOnFailure struct{ refGuard }

func (g *raiseOnFailure) Fence(ctx context.Context, r string, tok fence.Token, write func(context.Context) error) error {
	if err := fence.CheckArgs(r, tok); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := fence.Decide(r, tok, g.marks[r]); err != nil {
		return err
	}
	err := write(ctx)
	g.marks[r] = max(g.marks[r], tok)
	return err
}

// wrongHighest reports a wrong Highest in its stale errors.
type wrongHighest struct{ refGuard }

func (g *wrongHighest) Fence(ctx context.Context, r string, tok fence.Token, write func(context.Context) error) error {
	err := g.refGuard.Fence(ctx, r, tok, write)
	if se, ok := fence.IsStale(err); ok {
		return &fence.StaleError{Resource: r, Presented: tok, Highest: se.Highest + 1}
	}
	return err
}

// plainErrors refuses stale tokens with an error that is not ErrStale.
type plainErrors struct{ refGuard }

func (g *plainErrors) Fence(ctx context.Context, r string, tok fence.Token, write func(context.Context) error) error {
	err := g.refGuard.Fence(ctx, r, tok, write)
	if err != nil {
		return errors.New("refused: " + err.Error()) // deliberately drops the error chain
	}
	return nil
}

// noValidation skips argument validation.
type noValidation struct {
	mu    sync.Mutex
	marks map[string]fence.Token
}

func (g *noValidation) Fence(ctx context.Context, r string, tok fence.Token, write func(context.Context) error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := fence.Decide(r, tok, g.marks[r]); err != nil {
		return err
	}
	if err := write(ctx); err != nil {
		return err
	}
	g.marks[r] = max(g.marks[r], tok)
	return nil
}

func defaults(t *testing.T) guardtest.Config {
	cfg, err := guardtest.Config{}.WithDefaults()
	require.NoError(t, err)
	return cfg
}

// results runs every check against a fresh subject from mk and returns the
// error of each check by name.
func results(t *testing.T, cfg guardtest.Config, mk func() guardtest.Subject) map[string]error {
	t.Helper()
	out := map[string]error{}
	for _, c := range guardtest.Checks() {
		out[c.Name] = c.Func(context.Background(), mk(), cfg)
	}
	return out
}

func TestReferenceGuardPassesEveryCheck(t *testing.T) {
	res := results(t, defaults(t), func() guardtest.Subject {
		return newRemote(reportUnknown)
	})
	for name, err := range res {
		assert.NoError(t, err, name)
	}
	assert.Len(t, res, len(guardtest.Checks()))
}

// newMySubject is the Subject of the conformance snippet in docs/guards.md.
func newMySubject(*testing.T) guardtest.Subject {
	return guardtest.FromGuardStrict(newRef(), newRefStrict(), guardtest.NewMapStore())
}

// TestConformance is Run over the reference guard, as docs/guards.md shows.
func TestConformance(t *testing.T) {
	guardtest.Run(t, guardtest.Config{
		New: func(t *testing.T) guardtest.Subject { return newMySubject(t) },
	})
}

func TestKitDetectsBrokenGuards(t *testing.T) {
	cfg := defaults(t)
	for _, tc := range []struct {
		name  string
		guard func() fence.Guard
		fails []string
	}{
		{"accept all", func() fence.Guard { return acceptAll{} }, []string{"StaleRejected", "InvalidTokensRejected", "ConcurrentHistory"}},
		{"raise mark on failure", func() fence.Guard { return &raiseOnFailure{refGuard: *newRef()} }, []string{"FailedWriteKeepsMark"}},
		{"wrong highest", func() fence.Guard { return &wrongHighest{refGuard: *newRef()} }, []string{"StaleRejected", "InvalidTokensRejected", "ConcurrentHistory"}},
		{"errors not typed", func() fence.Guard { return &plainErrors{refGuard: *newRef()} }, []string{"StaleRejected", "InvalidTokensRejected", "InvalidResourcesRejected", "ConcurrentHistory"}},
		{"no validation", func() fence.Guard { return &noValidation{marks: map[string]fence.Token{}} }, []string{"InvalidTokensRejected", "InvalidResourcesRejected"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := results(t, cfg, func() guardtest.Subject {
				return guardtest.FromGuard(tc.guard(), guardtest.NewMapStore())
			})
			for _, name := range tc.fails {
				assert.Error(t, res[name], "check %s should fail", name)
			}
		})
	}
}

// The check-then-write guard loses races; the history check must catch it.
// Each run is random, so run the check until it fails (bounded).
func TestKitDetectsCheckThenWrite(t *testing.T) {
	cfg := defaults(t)
	for name, mk := range map[string]func() fence.Guard{
		"mark set to token":  func() fence.Guard { return &checkThenWrite{refGuard: *newRef()} },
		"mark raised by max": func() fence.Guard { return &checkThenWriteMax{refGuard: *newRef()} },
	} {
		t.Run(name, func(t *testing.T) {
			var err error
			runs := 0
			for ; runs < 50 && err == nil; runs++ {
				err = guardtest.CheckConcurrent(context.Background(), guardtest.FromGuard(mk(), guardtest.NewMapStore()), cfg)
			}
			require.Error(t, err, "check-then-write guard passed %d concurrent runs", runs)
			t.Logf("caught after %d run(s): %v", runs, err)
		})
	}
}

func stale(r string, presented, highest fence.Token) error {
	return &fence.StaleError{Resource: r, Presented: presented, Highest: highest}
}

var nothing = guardtest.State{}

func st(v string, tok fence.Token) guardtest.State {
	return guardtest.State{Value: v, Token: tok, Found: true}
}

func rd(s guardtest.State, inv, comp int64) guardtest.Observation {
	return guardtest.Observation{Resource: "r", State: s, Invoked: inv, Completed: comp}
}

func TestCheckHistory(t *testing.T) {
	a := func(tok fence.Token, inv, comp int64, err error) guardtest.Attempt {
		return guardtest.Attempt{Resource: "r", Token: tok, Value: fmt.Sprint("v", tok), Invoked: inv, Completed: comp, Err: err}
	}
	fin := func(v string, tok fence.Token) map[string]guardtest.State {
		return map[string]guardtest.State{"r": {Value: v, Token: tok, Found: true}}
	}
	for _, tc := range []struct {
		name    string
		h       []guardtest.Attempt
		final   map[string]guardtest.State
		wantErr string
		reads   []guardtest.Observation
	}{
		{"sequential ok", []guardtest.Attempt{a(1, 1, 2, nil), a(3, 3, 4, nil), a(2, 5, 6, stale("r", 2, 3))}, fin("v3", 3), "", nil},
		{"overlapping low after high is fine", []guardtest.Attempt{a(5, 1, 4, nil), a(4, 2, 5, nil)}, fin("v5", 5), "", nil},
		{"low accepted after high completed", []guardtest.Attempt{a(5, 1, 2, nil), a(4, 3, 4, nil)}, fin("v5", 5), "was accepted although token 5", nil},
		{"final state not highest", []guardtest.Attempt{a(5, 1, 4, nil), a(4, 2, 5, nil)}, fin("v4", 4), "final state", nil},
		{"final state missing value", []guardtest.Attempt{a(5, 1, 2, nil)}, map[string]guardtest.State{"r": {}}, "final state not found", nil},
		{"nothing accepted, found", []guardtest.Attempt{a(5, 1, 2, errors.New("x"))}, fin("v5", 5), "unexpected error", nil},
		{"stale with nothing higher", []guardtest.Attempt{a(2, 1, 2, stale("r", 2, 3))}, map[string]guardtest.State{"r": {}}, "no accepted write with token 3", nil},
		{"stale naming a later write", []guardtest.Attempt{a(2, 1, 2, stale("r", 2, 3)), a(3, 3, 4, nil)}, fin("v3", 3), "no accepted write with token 3", nil},
		{"stale naming a concurrent write is fine", []guardtest.Attempt{a(3, 1, 4, nil), a(2, 2, 3, stale("r", 2, 3))}, fin("v3", 3), "", nil},
		{"stale with wrong presented", []guardtest.Attempt{a(3, 1, 2, nil), a(2, 3, 4, stale("r", 1, 3))}, fin("v3", 3), "presented token 1", nil},
		{"stale not higher", []guardtest.Attempt{a(3, 1, 2, nil), a(3, 3, 4, stale("r", 3, 3))}, fin("v3", 3), "not higher", nil},
		{"stale not a StaleError", []guardtest.Attempt{a(3, 1, 2, nil), a(2, 3, 4, fmt.Errorf("x: %w", fence.ErrStale))}, fin("v3", 3), "not a *fence.StaleError", nil},
		{"busy is not a violation", []guardtest.Attempt{a(3, 1, 2, nil), a(4, 3, 4, fence.ErrBusy)}, fin("v3", 3), "", nil},
		{"bad ticks", []guardtest.Attempt{a(3, 2, 2, nil)}, fin("v3", 3), "not after invoked", nil},
		{"no final state", []guardtest.Attempt{a(3, 1, 2, nil)}, map[string]guardtest.State{}, "no final state", nil},
		{"reads ok", []guardtest.Attempt{a(3, 1, 4, nil), a(5, 5, 8, nil)}, fin("v5", 5), "",
			[]guardtest.Observation{rd(nothing, 0, 1), rd(st("v3", 3), 2, 3), rd(st("v3", 3), 5, 6), rd(st("v5", 5), 6, 9)}},
		{"read older than completed write", []guardtest.Attempt{a(3, 1, 2, nil), a(5, 3, 4, nil)}, fin("v5", 5), "returned token 3 after token 5",
			[]guardtest.Observation{rd(st("v3", 3), 5, 6)}},
		{"read nothing after a write", []guardtest.Attempt{a(3, 1, 2, nil)}, fin("v3", 3), "found nothing after token 3",
			[]guardtest.Observation{rd(nothing, 5, 6)}},
		{"read a refused value", []guardtest.Attempt{a(3, 1, 2, nil), a(2, 3, 4, stale("r", 2, 3))}, fin("v3", 3), "which no accepted write",
			[]guardtest.Observation{rd(st("v2", 2), 3, 6)}},
		{"read a value from the future", []guardtest.Attempt{a(3, 5, 6, nil)}, fin("v3", 3), "which no accepted write",
			[]guardtest.Observation{rd(st("v3", 3), 1, 2)}},
		{"read a wrong value", []guardtest.Attempt{a(3, 1, 2, nil)}, fin("v3", 3), "which no accepted write",
			[]guardtest.Observation{rd(st("other", 3), 3, 4)}},
		{"reads go back in time", []guardtest.Attempt{a(3, 1, 10, nil), a(5, 2, 11, nil)}, fin("v5", 5), "after an earlier read",
			[]guardtest.Observation{rd(st("v5", 5), 3, 4), rd(st("v3", 3), 5, 6)}},
		{"failed read", []guardtest.Attempt{a(3, 1, 2, nil)}, fin("v3", 3), "concurrent Read failed",
			[]guardtest.Observation{{Resource: "r", Invoked: 3, Completed: 4, Err: errors.New("io")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := guardtest.CheckHistory(guardtest.History{Attempts: tc.h, Final: tc.final, Reads: tc.reads})
			if tc.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.wantErr)
		})
	}
}

func TestWorkload(t *testing.T) {
	cfg := defaults(t)
	plan := guardtest.Workload(randFor(t), []string{"a", "b"}, cfg.Writers, 4)
	require.Len(t, plan, cfg.Writers)
	seen := map[string]map[fence.Token]bool{"a": {}, "b": {}}
	for _, as := range plan {
		assert.Len(t, as, 2*4)
		for _, a := range as {
			assert.False(t, seen[a.Resource][a.Token], "token %d on %s twice", a.Token, a.Resource)
			seen[a.Resource][a.Token] = true
		}
	}
	for r, toks := range seen {
		for tok := fence.Token(1); tok <= fence.Token(4*cfg.Writers); tok++ {
			assert.True(t, toks[tok], "token %d missing on %s", tok, r)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	cfg := defaults(t)
	assert.Equal(t, guardtest.DefaultWriters, cfg.Writers)
	assert.Equal(t, guardtest.DefaultRounds, cfg.Rounds)
	assert.Equal(t, guardtest.DefaultPrefix, cfg.Prefix)
	assert.Equal(t, guardtest.DefaultFaultRounds, cfg.FaultRounds)
	assert.Equal(t, guardtest.DefaultFaultEvery, cfg.FaultEvery)
	assert.Equal(t, guardtest.DefaultDeliveryDelay, cfg.DeliveryDelay)
	assert.Equal(t, guardtest.DefaultSearchTimeout, cfg.SearchTimeout)
	for _, bad := range []guardtest.Config{{Writers: -1}, {Rounds: -2}, {Prefix: "a\x00"}, {Timeout: -1},
		{FaultRounds: -1}, {FaultEvery: -3}, {DeliveryDelay: -1}, {SearchTimeout: -1}} {
		_, err := bad.WithDefaults()
		assert.ErrorIs(t, err, fence.ErrInvalidConfig, "%+v", bad)
	}
}

func TestFindStaleAcceptances(t *testing.T) {
	w := func(tok fence.Token, inv, comp int64) guardtest.AcceptedWrite {
		return guardtest.AcceptedWrite{Token: tok, Invoked: inv, Completed: comp}
	}
	for _, tc := range []struct {
		name   string
		writes []guardtest.AcceptedWrite
		want   []guardtest.StaleAcceptance
	}{
		{"none", nil, nil},
		{"ordered", []guardtest.AcceptedWrite{w(1, 1, 2), w(2, 3, 4), w(2, 5, 6)}, nil},
		{"overlapping is fine", []guardtest.AcceptedWrite{w(5, 1, 4), w(4, 2, 5)}, nil},
		{"low after high", []guardtest.AcceptedWrite{w(5, 1, 2), w(4, 3, 4)}, []guardtest.StaleAcceptance{{Later: 1, Earlier: 0}}},
		{"highest earlier one named", []guardtest.AcceptedWrite{w(3, 7, 8), w(9, 1, 2), w(6, 3, 4), w(2, 5, 6)},
			[]guardtest.StaleAcceptance{{Later: 2, Earlier: 1}, {Later: 3, Earlier: 1}, {Later: 0, Earlier: 1}}},
		{"equal tokens: earliest named", []guardtest.AcceptedWrite{w(9, 1, 2), w(9, 3, 4), w(1, 5, 6)}, []guardtest.StaleAcceptance{{Later: 2, Earlier: 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, guardtest.FindStaleAcceptances(tc.writes))
		})
	}
}

// emptyOnFence stores an empty value under the token whenever a Fence
// callback returns nil: a guard whose Fence on a missing resource makes a
// value appear.
type emptyOnFence struct {
	g     fence.Guard
	store guardtest.Store
}

func (e emptyOnFence) Fence(ctx context.Context, r string, tok fence.Token, write func(context.Context) error) error {
	return e.g.Fence(ctx, r, tok, func(ctx context.Context) error {
		if err := write(ctx); err != nil {
			return err
		}
		return e.store.Put(ctx, r, tok, "")
	})
}

// TestFenceChecksCatchDrifts: a guard whose Fence callback's ctx lacks the
// admitted claim fails CheckFenceClaim; one whose Fence on a missing
// resource makes a value appear fails CheckFenceMissing.
func TestFenceChecksCatchDrifts(t *testing.T) {
	cfg := defaults(t)
	plain := newRef()
	plain.plainCtx = true
	err := guardtest.CheckFenceClaim(context.Background(), guardtest.FromGuard(plain, guardtest.NewMapStore()), cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "fence.ClaimFromContext in write")

	store := guardtest.NewMapStore()
	err = guardtest.CheckFenceMissing(context.Background(), guardtest.FromGuard(emptyOnFence{newRef(), store}, store), cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "after a Fence that wrote nothing")
}
