package fence

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A store error seen after the context ended, wrapped the way a guard wraps
// it (its own prefix around the driver's error, then WrapContext), names
// the context's end once, and matches the context error, the cause and the
// store error.
func TestWrapContextNamesTheContextOnce(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errCause)
	storeErr := errors.New("store: connection reset")

	for name, err := range map[string]error{
		"store error":          WrapContext(ctx, fmt.Errorf("guard: commit %q: %w", "r", storeErr)),
		"driver's ctx error":   WrapContext(ctx, fmt.Errorf("guard: commit %q: %w", "r", context.Canceled)),
		"ContextError wrapped": WrapContext(ctx, fmt.Errorf("guard: %q: %w", "r", ContextError(ctx))),
		"wrapped twice":        WrapContext(ctx, fmt.Errorf("outer: %w", WrapContext(ctx, storeErr))),
		"outcome unknown":      OutcomeUnknown(ctx, "guard: commit", "r", fmt.Errorf("guard: %w", context.Canceled)),
	} {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, 1, strings.Count(err.Error(), "fence: context ended"), "message: %s", err)
			assert.Equal(t, 1, strings.Count(err.Error(), errCause.Error()), "message: %s", err)
			assert.ErrorIs(t, err, context.Canceled)
			assert.ErrorIs(t, err, errCause)
			assert.NotErrorIs(t, err, ErrBusy)
		})
	}
	err := WrapContext(ctx, storeErr)
	assert.ErrorIs(t, err, storeErr)
	assert.Equal(t, "fence: context ended: context canceled (test: lease lost): store: connection reset", err.Error())
	assert.Equal(t, "fence: context ended: context canceled (test: lease lost)", ContextError(ctx).Error())

	// A plain cancellation has no cause to name.
	plain, cancel2 := context.WithCancel(context.Background())
	cancel2()
	assert.Equal(t, "fence: context ended: context canceled: store: connection reset", WrapContext(plain, storeErr).Error())
	already := fmt.Errorf("guard: %w", context.Canceled)
	assert.Same(t, already, WrapContext(plain, already), "an error that matches the plain cancellation is kept")
}

func TestOutcomeUnknown(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errCause)
	err := OutcomeUnknown(ctx, "guard: commit", "acme/conv-1/notes", context.Canceled)
	assert.ErrorIs(t, err, ErrOutcomeUnknown)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, err, errCause)
	assert.NotErrorIs(t, err, ErrBusy)
	assert.NotErrorIs(t, err, ErrStale)
	oe, ok := IsOutcomeUnknown(fmt.Errorf("wrapped: %w", err))
	require.True(t, ok)
	assert.Equal(t, "guard: commit", oe.Op)
	assert.Equal(t, "acme/conv-1/notes", oe.Resource)
	assert.Contains(t, err.Error(), `guard: commit "acme/conv-1/notes": outcome unknown`)
	assert.NotContains(t, err.Error(), "nothing")

	// With a live context (a connection reset during COMMIT) it is the
	// store's error, not a context error.
	reset := errors.New("connection reset by peer")
	err = OutcomeUnknown(context.Background(), "guard: commit", "r", reset)
	assert.ErrorIs(t, err, ErrOutcomeUnknown)
	assert.ErrorIs(t, err, reset)
	assert.NotErrorIs(t, err, context.Canceled)
	_, ok = IsOutcomeUnknown(reset)
	assert.False(t, ok)
}

func TestScope(t *testing.T) {
	scope := JoinResource("acme", "conv-1")
	assert.Equal(t, "acme/conv-1", scope)
	for _, r := range []string{JoinResource("acme", "conv-1", "notes"), "acme/conv-1/a/b", JoinResource("acme", "conv-1", "")} {
		assert.True(t, InScope(scope, r), r)
		assert.NoError(t, CheckScope(r, Claim{Token: 1, Scope: scope}), r)
	}
	for _, r := range []string{
		"acme/conv-1",  // the scope itself is not a resource inside it
		"acme/conv-1/", // nothing after the separator
		"acme/conv-10/notes",
		"acme/conv-2/notes",
		JoinResource("acme", "conv-1/notes"), // one part with a slash: another key
		"acme",
		"x/acme/conv-1/notes",
	} {
		assert.False(t, InScope(scope, r), r)
		err := CheckScope(r, Claim{Token: 1, Scope: scope})
		assert.ErrorIs(t, err, ErrOutOfScope, r)
		se, ok := IsOutOfScope(err)
		require.True(t, ok)
		assert.Equal(t, ScopeError{Resource: r, Scope: scope}, *se)
		assert.NotErrorIs(t, err, ErrStale)
		assert.NotErrorIs(t, err, ErrBusy)
	}
	// A claim without a scope is outside every scope.
	err := CheckScope("acme/conv-1/notes", Claim{Token: 1})
	assert.ErrorIs(t, err, ErrOutOfScope)
	assert.Contains(t, err.Error(), "no scope")
	assert.False(t, InScope("", "anything"))

	// Keys whose parts contain the separator never contain each other's
	// resources.
	k1 := JoinResource("a", "b")
	k2 := JoinResource("a/b", "c")
	k3 := JoinResource("a", "b/c")
	assert.False(t, InScope(k1, JoinResource("a/b", "c", "x")))
	assert.False(t, InScope(k1, JoinResource("a", "b/c", "x")))
	assert.False(t, InScope(k2, JoinResource("a", "b", "c", "x")))
	assert.False(t, InScope(k3, JoinResource("a", "b", "c", "x")))
	assert.True(t, InScope(k3, JoinResource("a", "b/c", "x")))
}

func TestValidateScope(t *testing.T) {
	assert.NoError(t, ValidateScope(""))
	assert.NoError(t, ValidateScope("acme/conv-1"))
	for _, bad := range []string{"nul\x00", "line\nbreak", "\xff", strings.Repeat("s", MaxResourceLen+1), "trailing/"} {
		err := ValidateScope(bad)
		assert.ErrorIs(t, err, ErrInvalidScope, "%q", bad)
		assert.NotErrorIs(t, err, ErrInvalidResource, "%q", bad)
		assert.ErrorIs(t, Claim{Token: 1, Scope: bad}.Validate(), ErrInvalidScope, "%q", bad)
	}
	_, err := ClaimFromContext(WithClaim(context.Background(), Claim{Token: 3, Scope: "bad\n"}))
	assert.ErrorIs(t, err, ErrInvalidScope)

	// ClaimFor keeps the scope with the run when the token is ctx's.
	ctx := WithClaim(context.Background(), Claim{Token: 3, Run: "r1", Scope: "acme/conv-1"})
	assert.Equal(t, Claim{Token: 3, Run: "r1", Scope: "acme/conv-1"}, ClaimFor(ctx, 3))
	assert.Equal(t, Claim{Token: 4}, ClaimFor(ctx, 4))
}
