package s3guard

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/obs/obstest"
)

// TestGuardSpans: each Put, Delete and Do is one "fencekit.guard.write" span,
// a child of the span in ctx, with the claim and the outcome; a stale
// refusal is an outcome, not an error; Do's write runs under the span.
func TestGuardSpans(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		spans := obstest.NewSpans(t)
		s := e.store(t, nil, func(c *Config) { c.TracerProvider = spans.Provider })
		ctx, caller := spans.Start(testCtx(t), "tool-call")
		at := func(tok fence.Token) context.Context {
			return fence.WithClaim(ctx, fence.Claim{Token: tok, Run: "run-1"})
		}
		const key = "doc/1"
		_, err := s.PutBytes(at(5), key, []byte("a"), PutOptions{})
		require.NoError(t, err)
		_, err = s.PutBytes(at(4), key, []byte("old"), PutOptions{})
		require.ErrorIs(t, err, fence.ErrStale)
		require.NoError(t, s.Do(at(6), key, func(ctx context.Context) error {
			_, sp := spans.Start(ctx, "inner")
			sp.End()
			return Stage(ctx, bytes.NewReader(nil), 0, PutOptions{})
		}))
		_, err = s.Delete(at(7), key)
		require.NoError(t, err)

		got := spans.Ended("fencekit.guard.write")
		require.Len(t, got, 4)
		for i, want := range []struct{ tok, outcome, mark string }{
			{"5", "accepted", ""},
			{"4", "stale", "5"},
			{"6", "accepted", ""},
			{"7", "accepted", ""},
		} {
			a := obstest.SpanAttrs(got[i])
			require.True(t, obstest.ChildOf(got[i], caller.SpanContext()), "span %d", i)
			require.Equal(t, "s3", a["fencekit.guard.kind"])
			require.Equal(t, key, a["fencekit.guard.resource"])
			require.Equal(t, want.tok, a["fencekit.guard.token"])
			require.Equal(t, "run-1", a["fencekit.guard.run_id"])
			require.Equal(t, want.outcome, a["fencekit.guard.outcome"], "span %d", i)
			require.Equal(t, want.mark, a["fencekit.guard.mark.token"], "span %d", i)
			require.Equal(t, codes.Unset, got[i].Status().Code, "span %d", i)
		}
		inner := spans.Ended("inner")
		require.Len(t, inner, 1)
		require.True(t, obstest.ChildOf(inner[0], got[2].SpanContext()), "Do's write runs under the guard's span")
	})
}
