package redisguard

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/codes"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/obs/obstest"
)

// TestWriteSpans: each write is one "fencekit.guard.write" span with
// kind=redis, a child of the span in ctx; a reuse and a stale refusal are
// outcomes (status Unset) carrying the mark; Fence's write runs under the
// span of its final write, and a refusal on the mark Fence read first is
// a span marked as refused before writing.
func TestWriteSpans(t *testing.T) {
	s := newSpace(t)
	spans := obstest.NewSpans(t)
	g := s.guard(t, Config{TracerProvider: spans.Provider})
	ctx, caller := spans.Start(context.Background(), "tool-call")
	r := s.resources + "traced"
	steps := []struct {
		c               fence.Claim
		outcome, mark   string
		markRun, before string
	}{
		{fence.Claim{Token: 5, Run: "run-a"}, "accepted", "", "", ""},
		{fence.Claim{Token: 3, Run: "run-c"}, "stale", "5", "", ""},
		{fence.Claim{Token: 5, Run: "run-b"}, "reused", "5", "run-a", ""},
	}
	for _, st := range steps {
		_ = g.Put(fence.WithClaim(ctx, st.c), r, []byte("v"))
	}
	if err := g.Fence(fence.WithClaim(ctx, fence.Claim{Token: 2, Run: "run-d"}), r, 2, func(context.Context) error { return nil }); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Fence with token 2: %v", err)
	}
	steps = append(steps, struct {
		c               fence.Claim
		outcome, mark   string
		markRun, before string
	}{fence.Claim{Token: 2, Run: "run-d"}, "stale", "5", "", "true"})
	got := spans.Ended("fencekit.guard.write")
	if len(got) != len(steps) {
		t.Fatalf("%d spans, want %d", len(got), len(steps))
	}
	for i, st := range steps {
		a := obstest.SpanAttrs(got[i])
		want := map[string]string{
			"fencekit.guard.kind": "redis", "fencekit.guard.resource": r, "fencekit.guard.token": st.c.Token.String(),
			"fencekit.guard.run_id": st.c.Run, "fencekit.guard.outcome": st.outcome, "fencekit.guard.mark.token": st.mark,
			"fencekit.guard.mark.run_id": st.markRun, "fencekit.guard.before_write": st.before,
		}
		for k, v := range want {
			if a[k] != v {
				t.Errorf("span %d: %s = %q, want %q", i, k, a[k], v)
			}
		}
		if !obstest.ChildOf(got[i], caller.SpanContext()) {
			t.Errorf("span %d is not a child of the caller's span", i)
		}
		if got[i].Status().Code != codes.Unset {
			t.Errorf("span %d: status %v, want Unset", i, got[i].Status())
		}
	}
}
