package fence

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var errCause = errors.New("test: lease lost")

func TestClaimFromContext(t *testing.T) {
	_, err := ClaimFromContext(context.Background())
	assert.ErrorIs(t, err, ErrNoToken)

	_, err = ClaimFromContext(WithToken(context.Background(), 0))
	assert.ErrorIs(t, err, ErrInvalidToken)

	_, err = ClaimFromContext(WithClaim(context.Background(), Claim{Token: 3, Run: "bad run"}))
	assert.ErrorIs(t, err, ErrInvalidRun)

	ctx := WithClaim(context.Background(), Claim{Token: 9, Run: "6f1c2a9e-0b7d-4a51-9d3e-1f0a2b3c4d5e"})
	c, err := ClaimFromContext(ctx)
	require.NoError(t, err)
	assert.Equal(t, Token(9), c.Token)
	tok, ok := FromContext(ctx)
	assert.True(t, ok)
	assert.Equal(t, Token(9), tok)

	assert.Equal(t, c, ClaimFor(ctx, 9), "same token keeps the run")
	assert.Equal(t, Claim{Token: 4}, ClaimFor(ctx, 4), "another token never borrows the run")
	assert.Equal(t, Claim{Token: 4}, ClaimFor(context.Background(), 4))
}

func TestValidateRun(t *testing.T) {
	for _, ok := range []string{"", "a", "run-1", "6f1c2a9e-0b7d-4a51-9d3e-1f0a2b3c4d5e", strings.Repeat("x", MaxRunLen)} {
		assert.NoError(t, ValidateRun(ok), "%q", ok)
	}
	for _, bad := range []string{" ", "a b", "a\x00", "a\n", "é", "a/b", strings.Repeat("x", MaxRunLen+1)} {
		assert.ErrorIs(t, ValidateRun(bad), ErrInvalidRun, "%q", bad)
	}
}

func TestDecideClaim(t *testing.T) {
	assert.NoError(t, DecideClaim("r", Claim{Token: 5, Run: "a"}, 4, "b"), "higher token, other run")
	assert.NoError(t, DecideClaim("r", Claim{Token: 5, Run: "a"}, 5, "a"), "same run retrying")
	assert.NoError(t, DecideClaim("r", Claim{Token: 5}, 5, "a"), "no identity: token-only rule")
	assert.NoError(t, DecideClaim("r", Claim{Token: 5, Run: "a"}, 5, ""), "mark without identity")

	err := DecideClaim("r", Claim{Token: 5, Run: "a"}, 5, "b")
	require.ErrorIs(t, err, ErrTokenReused)
	re, ok := IsReused(err)
	require.True(t, ok)
	assert.Equal(t, ReusedError{Resource: "r", Token: 5, Run: "a", MarkRun: "b"}, *re)
	assert.NotErrorIs(t, err, ErrStale)
	assert.NotErrorIs(t, err, ErrBusy)

	err = DecideClaim("r", Claim{Token: 4, Run: "b"}, 5, "b")
	assert.ErrorIs(t, err, ErrStale)
	assert.NotErrorIs(t, err, ErrTokenReused)
}

func TestNextMark(t *testing.T) {
	tok, run := NextMark(Claim{Token: 6, Run: "a"}, 5, "b")
	assert.Equal(t, Token(6), tok)
	assert.Equal(t, "a", run)
	tok, run = NextMark(Claim{Token: 5}, 5, "b")
	assert.Equal(t, Token(5), tok)
	assert.Equal(t, "b", run, "a run-less write keeps the identity")
	tok, run = NextMark(Claim{Token: 6}, 5, "b")
	assert.Equal(t, Token(6), tok)
	assert.Equal(t, "", run)
}

func TestContextError(t *testing.T) {
	assert.NoError(t, ContextError(context.Background()))
	assert.NoError(t, WrapContext(context.Background(), nil))
	storeErr := errors.New("store: connection reset")
	assert.Equal(t, storeErr, WrapContext(context.Background(), storeErr))

	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errCause)
	err := ContextError(ctx)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, err, errCause)
	assert.NotErrorIs(t, err, ErrBusy)

	err = WrapContext(ctx, storeErr)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, err, storeErr)

	plain, cancel2 := context.WithCancel(context.Background())
	cancel2()
	assert.Equal(t, context.Canceled, ContextError(plain))
	err = WrapContext(plain, storeErr)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, err, storeErr)
}

func TestJoinResource(t *testing.T) {
	a := JoinResource("reports", "a/b", "c")
	b := JoinResource("reports", "a", "b/c")
	assert.NotEqual(t, a, b)
	assert.Equal(t, "reports/a%2Fb/c", a)
	assert.Equal(t, "reports/a/b%2Fc", b)
	assert.NotEqual(t, JoinResource("a%2Fb"), JoinResource("a/b"), "the escape character is escaped too")
	assert.NoError(t, ValidateResource(JoinResource("x", "sp ace", "..")))
	assert.Equal(t, "r/%2E%2E/%2E/%00/%252E", JoinResource("r", "..", ".", "", "%2E"))
	assert.Equal(t, "r/a..b/.x", JoinResource("r", "a..b", ".x"), "dots inside a part stay")
}
