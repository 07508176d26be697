package redisguard

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/codes"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardobs"
	"github.com/fencekit/fencekit/internal/obs/obstest"
)

// TestWriteSpans: each write is one guardobs.SpanWrite span with
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
		{fence.Claim{Token: 5, Run: "run-a"}, guardobs.OutcomeAccepted, "", "", ""},
		{fence.Claim{Token: 3, Run: "run-c"}, guardobs.OutcomeStale, "5", "", ""},
		{fence.Claim{Token: 5, Run: "run-b"}, guardobs.OutcomeReused, "5", "run-a", ""},
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
	}{fence.Claim{Token: 2, Run: "run-d"}, guardobs.OutcomeStale, "5", "", "true"})
	got := spans.Ended(guardobs.SpanWrite)
	if len(got) != len(steps) {
		t.Fatalf("%d spans, want %d", len(got), len(steps))
	}
	for i, st := range steps {
		a := obstest.SpanAttrs(got[i])
		want := map[string]string{
			guardobs.AttrKind: guardobs.KindRedis, guardobs.AttrResource: r, guardobs.AttrToken: st.c.Token.String(),
			guardobs.AttrRunID: st.c.Run, guardobs.AttrOutcome: st.outcome, guardobs.AttrMark: st.mark,
			guardobs.AttrMarkRun: st.markRun, guardobs.AttrNotSent: st.before,
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
