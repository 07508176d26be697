package memguard_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardtest"
	"github.com/fencekit/fencekit/guards/memguard"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newGuard(t *testing.T) *memguard.Guard {
	t.Helper()
	g, err := memguard.New(memguard.Config{})
	require.NoError(t, err)
	return g
}

func TestConformance(t *testing.T) {
	g := newGuard(t)
	store := guardtest.NewMapStore()
	guardtest.Run(t, guardtest.Config{
		New: func(*testing.T) guardtest.Subject { return guardtest.FromGuard(g, store) },
	})
}

func TestConformanceFreshGuardPerCheck(t *testing.T) {
	guardtest.Run(t, guardtest.Config{
		New: func(t *testing.T) guardtest.Subject {
			return guardtest.FromGuard(newGuard(t), guardtest.NewMapStore())
		},
		Writers: 16, Rounds: 50, Resources: 2,
	})
}

func TestMarkAndDecision(t *testing.T) {
	g := newGuard(t)
	ctx := context.Background()
	assert.Equal(t, fence.Token(0), g.Mark("r"))
	calls := 0
	w := func(context.Context) error { calls++; return nil }
	require.NoError(t, g.Fence(ctx, "r", 8, w))
	assert.Equal(t, fence.Token(8), g.Mark("r"))
	require.NoError(t, g.Fence(ctx, "r", 8, w))
	err := g.Fence(ctx, "r", 7, w)
	se, ok := fence.IsStale(err)
	require.True(t, ok, "%v", err)
	assert.Equal(t, fence.Token(7), se.Presented)
	assert.Equal(t, fence.Token(8), se.Highest)
	assert.Equal(t, 2, calls, "a stale call must not run write")
	assert.Equal(t, fence.Token(0), g.Mark("other"))
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
	assert.ErrorIs(t, g.Fence(ctx, "r", 1, nil), memguard.ErrNilWrite)
	assert.False(t, called)
	assert.Equal(t, fence.Token(0), g.Mark("r"))
}

func TestFailedWriteKeepsMark(t *testing.T) {
	g := newGuard(t)
	ctx := context.Background()
	require.NoError(t, g.Fence(ctx, "r", 3, func(context.Context) error { return nil }))
	boom := errors.New("boom")
	assert.ErrorIs(t, g.Fence(ctx, "r", 9, func(context.Context) error { return boom }), boom)
	assert.Equal(t, fence.Token(3), g.Mark("r"))
}

func TestPanicReleasesLock(t *testing.T) {
	g := newGuard(t)
	ctx := context.Background()
	assert.Panics(t, func() {
		_ = g.Fence(ctx, "r", 5, func(context.Context) error { panic("write panicked") })
	})
	assert.Equal(t, fence.Token(0), g.Mark("r"), "a panicking write must not raise the mark")
	require.NoError(t, g.Fence(ctx, "r", 4, func(context.Context) error { return nil }), "lock must be released after a panic")
	assert.Equal(t, fence.Token(4), g.Mark("r"))
}

// A caller waiting for a resource held by a slow write gives up when its
// ctx ends, with an error matching fence.ErrBusy, without running its write.
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
	assert.Equal(t, fence.Token(0), g.Mark("r"), "Mark does not wait for, or count, a write in progress")
	ctx, cancel := context.WithCancel(context.Background())
	waiting := make(chan error, 1)
	called := false
	go func() {
		waiting <- g.Fence(ctx, "r", 2, func(context.Context) error { called = true; return nil })
	}()
	// Other resources are not blocked by r's holder.
	require.NoError(t, g.Fence(context.Background(), "s", 1, func(context.Context) error { return nil }))
	cancel()
	err := <-waiting
	assert.ErrorIs(t, err, fence.ErrBusy)
	assert.ErrorIs(t, err, context.Canceled)
	assert.False(t, called)
	close(release)
	require.NoError(t, <-done)
	assert.Equal(t, fence.Token(1), g.Mark("r"))
	// An already-cancelled ctx is refused up front.
	assert.ErrorIs(t, g.Fence(ctx, "r", 5, func(context.Context) error { return nil }), fence.ErrBusy)
}
