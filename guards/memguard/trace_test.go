package memguard_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/memguard"
	"github.com/fencekit/fencekit/internal/obs/obstest"
)

// TestWriteSpans: each Do/Fence call is one "fencekit.guard.write" span, a
// child of the span in ctx, with the resource, claim and outcome; write's
// ctx carries it; out-of-scope and stale refusals are outcomes (status
// Unset), a failing write is an error.
func TestWriteSpans(t *testing.T) {
	spans := obstest.NewSpans(t)
	g, err := memguard.New(memguard.Config{TracerProvider: spans.Provider, Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, caller := spans.Start(context.Background(), "tool-call")
	at := func(tok fence.Token) context.Context {
		return fence.WithClaim(ctx, fence.Claim{Token: tok, Run: "run-1", Scope: "acct"})
	}
	inner := func(ctx context.Context) error {
		_, sp := spans.Start(ctx, "store-write")
		sp.End()
		return nil
	}
	boom := errors.New("boom")
	steps := []struct {
		tok      fence.Token
		resource string
		write    func(context.Context) error
		outcome  string
		status   codes.Code
	}{
		{5, "acct/doc", inner, "accepted", codes.Unset},
		{4, "acct/doc", inner, "stale", codes.Unset},
		{6, "other/doc", inner, "out_of_scope", codes.Unset},
		{6, "acct/doc", func(context.Context) error { return boom }, "error", codes.Error},
	}
	for _, s := range steps {
		_ = g.Do(at(s.tok), s.resource, s.write)
	}
	got := spans.Ended("fencekit.guard.write")
	if len(got) != len(steps) {
		t.Fatalf("%d write spans, want %d", len(got), len(steps))
	}
	for i, s := range steps {
		sp, a := got[i], obstest.SpanAttrs(got[i])
		if !obstest.ChildOf(sp, caller.SpanContext()) {
			t.Errorf("step %d: not a child of the caller's span", i)
		}
		want := map[string]string{
			"fencekit.guard.kind": "memory", "fencekit.guard.resource": s.resource,
			"fencekit.guard.token": s.tok.String(), "fencekit.guard.run_id": "run-1", "fencekit.guard.scope": "acct",
			"fencekit.guard.outcome": s.outcome,
		}
		for k, v := range want {
			if a[k] != v {
				t.Errorf("step %d: %s = %q, want %q", i, k, a[k], v)
			}
		}
		if sp.Status().Code != s.status {
			t.Errorf("step %d: status %v, want %v", i, sp.Status().Code, s.status)
		}
	}
	if a := obstest.SpanAttrs(got[1]); a["fencekit.guard.mark.token"] != "5" {
		t.Errorf("stale span mark %q, want 5", a["fencekit.guard.mark.token"])
	}
	stores := spans.Ended("store-write")
	if len(stores) != 1 || !obstest.ChildOf(stores[0], got[0].SpanContext()) {
		t.Errorf("the write's own span is not a child of the guard's: %v", stores)
	}

	// No claim in ctx: refused before any write, still one span.
	if err := g.Do(ctx, "acct/doc", inner); !errors.Is(err, fence.ErrNoToken) {
		t.Fatal(err)
	}
	got = spans.Ended("fencekit.guard.write")
	if a := obstest.SpanAttrs(got[len(got)-1]); a["fencekit.guard.outcome"] != "invalid" || a["fencekit.guard.before_write"] != "true" {
		t.Errorf("no-claim span %v", a)
	}
}

// TestWriteSpansOff: without a TracerProvider a write records no span and
// leaves ctx's span alone.
func TestWriteSpansOff(t *testing.T) {
	spans := obstest.NewSpans(t)
	g, err := memguard.New(memguard.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, caller := spans.Start(context.Background(), "tool-call")
	err = g.Do(fence.WithClaim(ctx, fence.Claim{Token: 1}), "doc", func(wctx context.Context) error {
		if !trace.SpanContextFromContext(wctx).Equal(caller.SpanContext()) {
			return errors.New("the write's ctx does not carry the caller's span")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	caller.End()
	if got := spans.Ended(""); len(got) != 1 || got[0].Name() != "tool-call" {
		t.Errorf("spans %v, want only the caller's", got)
	}
}
