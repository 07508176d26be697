package s3guard

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/obs/obstest"
)

// TestContextForms: Put, PutBytes, Delete and Do take the claim from ctx; a
// ctx without one is refused with fence.ErrNoToken and nothing is read or
// written. The explicit-token forms pair the token with ctx's run only when
// ctx's claim is for the same token (fence.ClaimFor).
func TestContextForms(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		s := e.store(t, nil, nil)
		ctx := testCtx(t)
		before := e.snapshot(t)
		_, err := s.PutBytes(ctx, "cf", []byte("x"), PutOptions{})
		assert.ErrorIs(t, err, fence.ErrNoToken)
		_, err = s.Put(ctx, "cf", strings.NewReader("x"), 1, PutOptions{})
		assert.ErrorIs(t, err, fence.ErrNoToken)
		_, err = s.Delete(ctx, "cf")
		assert.ErrorIs(t, err, fence.ErrNoToken)
		called := false
		err = s.Do(ctx, "cf", func(context.Context) error { called = true; return nil })
		assert.ErrorIs(t, err, fence.ErrNoToken)
		assert.False(t, called)
		assert.Equal(t, before, e.snapshot(t), "no claim: nothing written")

		runA := fence.WithClaim(ctx, fence.Claim{Token: 4, Run: "run-a"})
		info, err := s.PutBytes(runA, "cf", []byte("a"), PutOptions{})
		require.NoError(t, err)
		assert.Equal(t, fence.Token(4), info.Token)
		assert.Equal(t, "run-a", info.Run)
		err = s.Do(runA, "cf", func(ctx context.Context) error {
			c, err := fence.ClaimFromContext(ctx)
			require.NoError(t, err)
			assert.Equal(t, fence.Claim{Token: 4, Run: "run-a"}, c, "the write sees the claim")
			return Stage(ctx, strings.NewReader("a2"), 2, PutOptions{})
		})
		require.NoError(t, err)
		got, gi := content(t, s, "cf")
		assert.Equal(t, "a2", got)
		assert.Equal(t, "run-a", gi.Run)

		// Explicit token equal to ctx's: ctx's run is presented (so another
		// run's ctx is refused as reuse); a different token: no run.
		runB := fence.WithClaim(ctx, fence.Claim{Token: 4, Run: "run-b"})
		_, err = s.PutBytes(fence.WithClaim(runB, fence.ClaimFor(runB, 4)), "cf", []byte("b"), PutOptions{})
		assert.ErrorIs(t, err, fence.ErrTokenReused)
		info, err = s.PutBytes(fence.WithClaim(runB, fence.ClaimFor(runB, 5)), "cf", []byte("five"), PutOptions{})
		require.NoError(t, err)
		assert.Equal(t, "", info.Run, "token 5 was not granted to run-b's claim")

		del, err := s.Delete(fence.WithToken(ctx, 6), "cf")
		require.NoError(t, err)
		assert.True(t, del.Deleted)
		assert.Equal(t, fence.Token(6), del.Token)
	})
}

var errLeaseLost = errors.New("test: lease lost (trust expired)")

// assertEnded checks that err reports the end of a ctx cancelled with
// errLeaseLost: it matches context.Canceled and the cause, never ErrBusy.
func assertEnded(t *testing.T, err error, what string) {
	t.Helper()
	require.Error(t, err, what)
	assert.ErrorIs(t, err, context.Canceled, what)
	assert.ErrorIs(t, err, errLeaseLost, "%s: the lease's cause", what)
	assert.NotErrorIs(t, err, fence.ErrBusy, what)
}

// TestEndedContext: once the lease's ctx has ended (cancelled with a cause),
// every call reports the end with its cause: before any I/O, and when the
// ctx ends in the middle of a write (after the pointer read, before the
// commit), also when the conditional PUT's retries are cut short.
func TestEndedContext(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		s := e.store(t, nil, nil)
		_, err := put(t, s, "ended", 1, "one")
		require.NoError(t, err)
		before := e.snapshot(t)

		ended, cancel := context.WithCancelCause(fence.WithClaim(testCtx(t), fence.Claim{Token: 2, Run: "r"}))
		cancel(errLeaseLost)
		_, err = s.PutBytes(ended, "ended", []byte("late"), PutOptions{})
		assertEnded(t, err, "PutBytes")
		_, err = s.PutBytes(fence.WithClaim(ended, fence.ClaimFor(ended, 2)), "ended", []byte("late"), PutOptions{})
		assertEnded(t, err, "PutBytesClaim")
		_, err = s.Delete(ended, "ended")
		assertEnded(t, err, "Delete")
		assertEnded(t, s.Fence(ended, "ended", 2, func(context.Context) error { return nil }), "Fence")
		_, _, err = s.GetBytes(ended, "ended")
		assertEnded(t, err, "GetBytes")
		_, err = s.Mark(ended, "ended")
		assertEnded(t, err, "Mark")
		_, err = s.Sweep(ended, "ended")
		assertEnded(t, err, "Sweep")
		assert.Equal(t, before, e.snapshot(t), "nothing written")

		// The lease is lost between the pointer read and the commit.
		for _, cache := range cacheModes {
			t.Run("mid-write/"+cache.name, func(t *testing.T) {
				ms := e.store(t, e.newClient(t, nil), func(c *Config) { c.PointerCacheSize = cache.size })
				ctx, cancel := context.WithCancelCause(testCtx(t))
				ms.afterRead = func(string) { cancel(errLeaseLost) }
				_, err := ms.PutBytes(fence.WithClaim(ctx, fence.ClaimFor(ctx, 3)), "ended", []byte("late"), PutOptions{})
				assertEnded(t, err, "Put")
				got, gi := content(t, s, "ended")
				assert.Equal(t, "one", got)
				assert.Equal(t, fence.Token(1), gi.Token)
			})
		}

		// Cancelled while waiting out 409 conflicts: not busy.
		ft := &faultyTransport{match: pathIs(e.bucket, "ended")}
		cs := e.store(t, e.newClient(t, ft), func(c *Config) { c.MaxAttempts = 3 })
		ctx, cancelConflict := context.WithCancelCause(testCtx(t))
		ft.fake = func(_ int, req *http.Request) *http.Response {
			cancelConflict(errLeaseLost)
			return conflict409(req)
		}
		_, err = cs.PutBytes(fence.WithClaim(ctx, fence.ClaimFor(ctx, 4)), "ended", []byte("late"), PutOptions{})
		assertEnded(t, err, "Put during conflicts")
	})
}

// TestTokenReuse: the pointer carries the run identity with the token; a
// write with the mark's token from a different run is refused with
// *fence.ReusedError (counted in fencekit.guard.reused, logged at Error),
// also when this Guard's pointer cache had not yet seen the mark. A write
// without a run keeps the token-only rule and does not erase the mark's run.
func TestTokenReuse(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		ctx := testCtx(t)
		mt := obstest.NewMeter(t)
		logs, logger := obstest.NewLogs()
		a := e.store(t, nil, func(c *Config) { c.MeterProvider = mt.Provider; c.Logger = logger })
		b := e.store(t, e.newClient(t, nil), nil)
		as := func(tok fence.Token, run string) context.Context {
			return fence.WithClaim(ctx, fence.Claim{Token: tok, Run: run})
		}
		const key = "reuse/doc"
		_, err := a.PutBytes(as(5, "run-a"), key, []byte("a"), PutOptions{})
		require.NoError(t, err)
		_, err = a.PutBytes(as(5, "run-a"), key, []byte("a again"), PutOptions{})
		require.NoError(t, err, "the same run writes many times")
		before := e.snapshot(t)

		_, err = a.PutBytes(as(5, "run-b"), key, []byte("b"), PutOptions{})
		re, ok := fence.IsReused(err)
		require.True(t, ok, "want *fence.ReusedError, got %v", err)
		assert.Equal(t, fence.ReusedError{Resource: key, Token: 5, Run: "run-b", MarkRun: "run-a"}, *re)
		assert.NotErrorIs(t, err, fence.ErrStale)
		assert.NotErrorIs(t, err, fence.ErrBusy)
		assert.Equal(t, before, e.snapshot(t), "a refused reuse uploads nothing")
		err = a.Fence(as(5, "run-b"), key, 5, func(context.Context) error { t.Error("write called"); return nil })
		assert.ErrorIs(t, err, fence.ErrTokenReused)

		// Token-only write: admitted, the mark keeps run-a.
		info, err := a.PutBytes(fence.WithClaim(ctx, fence.ClaimFor(ctx, 5)), key, []byte("no run"), PutOptions{})
		require.NoError(t, err)
		assert.Equal(t, "run-a", info.Run)

		// Another Guard raises the mark under run-c; a's cache still holds
		// token 5, so a's decision for (6, run-d) is tentative: the commit's
		// If-Match fails, the re-read finds (6, run-c) and refuses.
		_, err = b.PutBytes(as(6, "run-c"), key, []byte("c"), PutOptions{})
		require.NoError(t, err)
		_, err = a.PutBytes(as(6, "run-d"), key, []byte("d"), PutOptions{})
		re, ok = fence.IsReused(err)
		require.True(t, ok, "want *fence.ReusedError, got %v", err)
		assert.Equal(t, "run-c", re.MarkRun)
		got, gi := content(t, a, key)
		assert.Equal(t, "c", got)
		assert.Equal(t, "run-c", gi.Run)
		for _, k := range e.listAll(t) {
			assert.False(t, strings.HasPrefix(k, DefaultDataPrefix+key+"/") && k != gi.DataKey, "refused reuse left %q", k)
		}

		pts := mt.Collect()
		assert.EqualValues(t, 3, obstest.Value(pts, "fencekit.guard.reused", map[string]string{"guard": "s3"}))
		errs := logs.AtLeast(slog.LevelError)
		require.Len(t, errs, 3)
		assert.Equal(t, "run-d", errs[2].Attrs["run"])
		assert.Equal(t, "run-c", errs[2].Attrs["mark_run"])
		assert.Equal(t, "6", errs[2].Attrs["token"])
	})
}
