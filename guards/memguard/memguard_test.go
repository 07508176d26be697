package memguard_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardtest"
	"github.com/fencekit/fencekit/guards/memguard"
	"github.com/fencekit/fencekit/internal/obs/obstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newGuard(t *testing.T) *memguard.Guard {
	t.Helper()
	g, err := memguard.New(memguard.Config{})
	require.NoError(t, err)
	return g
}

func newStrict(t *testing.T) *memguard.Guard {
	t.Helper()
	g, err := memguard.New(memguard.Config{Strict: true})
	require.NoError(t, err)
	return g
}

// The kit over memguard; the strict checks through a second, strict Guard
// over the same store. (No OutcomeWriter: nothing is sent anywhere.)
func TestConformance(t *testing.T) {
	g, strict := newGuard(t), newStrict(t)
	store := guardtest.NewMapStore()
	guardtest.Run(t, guardtest.Config{
		New: func(*testing.T) guardtest.Subject { return guardtest.FromGuardStrict(g, strict, store) },
	})
}

func TestConformanceFreshGuardPerCheck(t *testing.T) {
	guardtest.Run(t, guardtest.Config{
		New: func(t *testing.T) guardtest.Subject {
			return guardtest.FromGuardStrict(newGuard(t), newStrict(t), guardtest.NewMapStore())
		},
		Writers: 16, Rounds: 50, Resources: 2,
	})
}

func TestMarkAndDecision(t *testing.T) {
	g := newGuard(t)
	ctx := context.Background()
	assert.Equal(t, fence.Token(0), markOf(g, "r"))
	calls := 0
	w := func(context.Context) error { calls++; return nil }
	require.NoError(t, g.Fence(ctx, "r", 8, w))
	assert.Equal(t, fence.Token(8), markOf(g, "r"))
	require.NoError(t, g.Fence(ctx, "r", 8, w))
	err := g.Fence(ctx, "r", 7, w)
	se, ok := fence.IsStale(err)
	require.True(t, ok, "%v", err)
	assert.Equal(t, fence.Token(7), se.Presented)
	assert.Equal(t, fence.Token(8), se.Highest)
	assert.Equal(t, 2, calls, "a stale call must not run write")
	assert.Equal(t, fence.Token(0), markOf(g, "other"))
}

func TestBadArgumentsDoNotCallWrite(t *testing.T) {
	g := newGuard(t)
	ctx := context.Background()
	called := false
	w := func(context.Context) error { called = true; return nil }
	assert.ErrorIs(t, g.Fence(ctx, "r", 0, w), fence.ErrInvalidToken)
	assert.ErrorIs(t, g.Fence(ctx, "r", -3, w), fence.ErrInvalidToken)
	assert.ErrorIs(t, g.Fence(ctx, "", 1, w), fence.ErrInvalidResource)
	assert.ErrorIs(t, g.Fence(ctx, "a\x00", 1, w), fence.ErrInvalidResource)
	assert.ErrorIs(t, g.Fence(ctx, "r", 1, nil), fence.ErrNilArgument)
	var nilCtx context.Context
	assert.ErrorIs(t, g.Fence(nilCtx, "r", 1, func(context.Context) error { return nil }), fence.ErrNilArgument)
	assert.ErrorIs(t, g.Do(nilCtx, "r", func(context.Context) error { return nil }), fence.ErrNilArgument)
	_, err := g.Mark(nilCtx, "r")
	assert.ErrorIs(t, err, fence.ErrNilArgument)
	assert.False(t, called)
	assert.Equal(t, fence.Token(0), markOf(g, "r"))
}

func TestFailedWriteKeepsMark(t *testing.T) {
	g := newGuard(t)
	ctx := context.Background()
	require.NoError(t, g.Fence(ctx, "r", 3, func(context.Context) error { return nil }))
	boom := errors.New("boom")
	assert.ErrorIs(t, g.Fence(ctx, "r", 9, func(context.Context) error { return boom }), boom)
	assert.Equal(t, fence.Token(3), markOf(g, "r"))
}

func TestPanicReleasesLock(t *testing.T) {
	g := newGuard(t)
	ctx := context.Background()
	assert.Panics(t, func() {
		_ = g.Fence(ctx, "r", 5, func(context.Context) error { panic("write panicked") })
	})
	assert.Equal(t, fence.Token(0), markOf(g, "r"), "a panicking write must not raise the mark")
	require.NoError(t, g.Fence(ctx, "r", 4, func(context.Context) error { return nil }), "lock must be released after a panic")
	assert.Equal(t, fence.Token(4), markOf(g, "r"))
}

// A caller waiting for a resource held by a slow write gives up when its
// ctx ends, with an error matching ctx.Err() and its cause (never
// fence.ErrBusy: the lease is gone, a retry cannot help), without running
// its write.
func TestWaitBoundedByContext(t *testing.T) {
	g := newGuard(t)
	inside := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- g.Fence(context.Background(), "r", 1, func(context.Context) error {
			close(inside)
			<-release
			return nil
		})
	}()
	<-inside
	assert.Equal(t, fence.Token(0), markOf(g, "r"), "Mark does not wait for, or count, a write in progress")
	lost := errors.New("lease lost")
	ctx, cancel := context.WithCancelCause(context.Background())
	waiting := make(chan error, 1)
	called := false
	go func() {
		waiting <- g.Fence(ctx, "r", 2, func(context.Context) error { called = true; return nil })
	}()
	// Other resources are not blocked by r's holder.
	require.NoError(t, g.Fence(context.Background(), "s", 1, func(context.Context) error { return nil }))
	cancel(lost)
	err := <-waiting
	assert.NotErrorIs(t, err, fence.ErrBusy)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, err, lost)
	assert.False(t, called)
	close(release)
	require.NoError(t, <-done)
	assert.Equal(t, fence.Token(1), markOf(g, "r"))
	// An already-cancelled ctx is refused up front, by both forms.
	err = g.Fence(ctx, "r", 5, func(context.Context) error { return nil })
	assert.ErrorIs(t, err, lost)
	assert.NotErrorIs(t, err, fence.ErrBusy)
	err = g.Do(fence.WithToken(ctx, 5), "r", func(context.Context) error { return nil })
	assert.ErrorIs(t, err, lost)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, fence.Token(1), markOf(g, "r"))
}

// Do takes the claim from ctx; without one it refuses with ErrNoToken and
// does not call write.
func TestDoTakesTheClaimFromContext(t *testing.T) {
	g := newGuard(t)
	type userKey struct{}
	ctx := context.WithValue(context.Background(), userKey{}, "ada")
	called := 0
	w := func(ctx context.Context) error {
		called++
		assert.Equal(t, "ada", ctx.Value(userKey{}), "write sees the caller's values")
		return nil
	}
	err := g.Do(ctx, "r", w)
	assert.ErrorIs(t, err, fence.ErrNoToken)
	assert.Equal(t, 0, called)
	assert.Equal(t, fence.Token(0), markOf(g, "r"))

	require.NoError(t, g.Do(fence.WithToken(ctx, 8), "r", w))
	assert.Equal(t, fence.Token(8), markOf(g, "r"))
	_, stale := fence.IsStale(g.Do(fence.WithToken(ctx, 7), "r", w))
	assert.True(t, stale)
	assert.ErrorIs(t, g.Do(fence.WithClaim(ctx, fence.Claim{Token: 9, Run: "bad run"}), "r", w), fence.ErrInvalidRun)
	assert.ErrorIs(t, g.Do(fence.WithToken(ctx, 9), "", w), fence.ErrInvalidResource)
	assert.ErrorIs(t, g.Do(fence.WithToken(ctx, 9), "r", nil), fence.ErrNilArgument)
	assert.Equal(t, 1, called)
	assert.Equal(t, fence.Token(8), markOf(g, "r"))
}

// The explicit-token form honours the run identity of a lease context
// (fence.ClaimFor): same token as the context's claim → its run is
// presented; a different token → no run (token-only rule).
func TestFenceHonoursTheContextsRun(t *testing.T) {
	g := newGuard(t)
	ok := func(context.Context) error { return nil }
	runA := fence.WithClaim(context.Background(), fence.Claim{Token: 7, Run: "run-a"})
	runB := fence.WithClaim(context.Background(), fence.Claim{Token: 7, Run: "run-b"})
	require.NoError(t, g.Fence(runA, "r", 7, ok))
	err := g.Fence(runB, "r", 7, ok)
	re, isReused := fence.IsReused(err)
	require.True(t, isReused, "%v", err)
	assert.Equal(t, fence.ReusedError{Resource: "r", Token: 7, Run: "run-b", MarkRun: "run-a"}, *re)
	assert.NotErrorIs(t, err, fence.ErrStale)
	assert.NotErrorIs(t, err, fence.ErrBusy)
	// Token 7 from B's context but passed for a different token than the
	// context's claim carries: presented without a run, admitted.
	otherTok := fence.WithClaim(context.Background(), fence.Claim{Token: 6, Run: "run-b"})
	require.NoError(t, g.Fence(otherTok, "r", 7, ok))
	// The run-less write kept A's identity: B is still refused.
	assert.ErrorIs(t, g.Fence(runB, "r", 7, ok), fence.ErrTokenReused)
	require.NoError(t, g.Fence(runA, "r", 7, ok))
	assert.Equal(t, fence.Token(7), markOf(g, "r"))
}

// A reuse refusal is counted in fencekit.guard.reused and logged at Error.
func TestReuseMetricAndLog(t *testing.T) {
	m := obstest.NewMeter(t)
	logs, logger := obstest.NewLogs()
	g, err := memguard.New(memguard.Config{MeterProvider: m.Provider, Logger: logger})
	require.NoError(t, err)
	ok := func(context.Context) error { return nil }
	require.NoError(t, g.Do(fence.WithClaim(context.Background(), fence.Claim{Token: 3, Run: "run-a"}), "r", ok))
	for range 2 {
		assert.ErrorIs(t, g.Do(fence.WithClaim(context.Background(), fence.Claim{Token: 3, Run: "run-b"}), "r", ok), fence.ErrTokenReused)
	}
	pts := m.Collect()
	assert.Equal(t, 2.0, obstest.Value(pts, "fencekit.guard.reused", map[string]string{"guard": "memory"}))
	assert.Equal(t, 1.0, obstest.Value(pts, "fencekit.guard.accepted", map[string]string{"guard": "memory"}))
	assert.Equal(t, 0.0, obstest.Value(pts, "fencekit.guard.stale", nil))
	recs := logs.Records()
	require.Len(t, recs, 2)
	for _, r := range recs {
		assert.Equal(t, slog.LevelError, r.Level)
		assert.Equal(t, "r", r.Attrs["resource"])
		assert.Equal(t, "run-b", r.Attrs["run"])
		assert.Equal(t, "run-a", r.Attrs["mark_run"])
	}
}

// TestMarkReturnsClaim: Mark returns the mark's token with its run identity, the
// zero claim for an unwritten resource, and refuses a bad resource or an
// ended context with an error.
func TestMarkReturnsClaim(t *testing.T) {
	g, err := memguard.New(memguard.Config{})
	require.NoError(t, err)
	ctx := fence.WithClaim(context.Background(), fence.Claim{Token: 4, Run: "run-a"})
	require.NoError(t, g.Do(ctx, "r", func(context.Context) error { return nil }))
	c, err := g.Mark(context.Background(), "r")
	require.NoError(t, err)
	assert.Equal(t, fence.Claim{Token: 4, Run: "run-a"}, c)
	c, err = g.Mark(context.Background(), "unwritten")
	require.NoError(t, err)
	assert.Equal(t, fence.Claim{}, c)
	_, err = g.Mark(context.Background(), "")
	assert.ErrorIs(t, err, fence.ErrInvalidResource)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = g.Mark(ended, "r")
	assert.ErrorIs(t, err, context.Canceled)
}
