package guardobs_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardobs"
)

// TestWriteSpans: each Start/End pair is one SpanWrite span, a child of
// the span in ctx, with the claim, the outcome of the error and, for a
// refusal, the mark; only failures have status Error.
func TestWriteSpans(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	r, err := guardobs.New(guardobs.Config{Kind: "etcd", TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	ctx, parent := tp.Tracer("test").Start(context.Background(), "caller")
	c := fence.Claim{Token: 7, Run: "run-a", Scope: "acct/sess"}
	cases := []struct {
		err     error
		outcome string
		status  codes.Code
		mark    string
	}{
		{nil, "accepted", codes.Unset, ""},
		{&fence.StaleError{Resource: "r", Presented: 7, Highest: 9}, "stale", codes.Unset, "9"},
		{fence.WrapContext(ctx, &fence.ReusedError{Resource: "r", Token: 7, Run: "run-a", MarkRun: "run-b"}), "reused", codes.Unset, "7"},
		{&fence.ScopeError{Resource: "r", Scope: "acct/sess"}, "out_of_scope", codes.Unset, ""},
		{fmt.Errorf("x: %w", fence.ErrBusy), "busy", codes.Unset, ""},
		{&fence.OutcomeUnknownError{Op: "etcdguard: put", Resource: "r", Err: context.DeadlineExceeded}, "outcome_unknown", codes.Error, ""},
		{fence.ErrInvalidToken, "invalid", codes.Error, ""},
		{fmt.Errorf("etcdguard: %w", context.Canceled), "canceled", codes.Error, ""},
		{errors.New("store down"), "error", codes.Error, ""},
	}
	for _, tc := range cases {
		_, sp := r.Start(ctx, "acct/sess/doc", c)
		sp.End(tc.err)
	}
	ended := sr.Ended()
	if len(ended) != len(cases) {
		t.Fatalf("%d spans, want %d", len(ended), len(cases))
	}
	for i, tc := range cases {
		sp := ended[i]
		a := map[string]string{}
		for _, kv := range sp.Attributes() {
			a[string(kv.Key)] = kv.Value.String()
		}
		want := map[string]string{
			"fencekit.guard.kind": "etcd", "fencekit.guard.resource": "acct/sess/doc", "fencekit.guard.token": "7",
			"fencekit.guard.run_id": "run-a", "fencekit.guard.scope": "acct/sess", "fencekit.guard.outcome": tc.outcome,
		}
		if tc.mark != "" {
			want["fencekit.guard.mark.token"] = tc.mark
		}
		if tc.outcome == "reused" {
			want["fencekit.guard.mark.run_id"] = "run-b"
		}
		if fmt.Sprint(a) != fmt.Sprint(want) {
			t.Errorf("%v: attributes %v, want %v", tc.err, a, want)
		}
		if sp.Name() != "fencekit.guard.write" || sp.Parent().SpanID() != parent.SpanContext().SpanID() ||
			sp.SpanContext().TraceID() != parent.SpanContext().TraceID() {
			t.Errorf("%v: span %s parent %v, want %s child of %v", tc.err, sp.Name(), sp.Parent(), "fencekit.guard.write", parent.SpanContext())
		}
		if sp.Status().Code != tc.status {
			t.Errorf("%v: status %v, want %v", tc.err, sp.Status().Code, tc.status)
		}
		if recorded := len(sp.Events()) > 0; recorded != (tc.status == codes.Error) {
			t.Errorf("%v: error recorded %v, want %v", tc.err, recorded, tc.status == codes.Error)
		}
	}

	// Refused: a span marked as refused before any I/O; nothing for nil.
	r.Refused(ctx, "other/doc", c, &fence.ScopeError{Resource: "other/doc", Scope: "acct/sess"})
	r.Refused(ctx, "acct/sess/doc", c, nil)
	ended = sr.Ended()
	if len(ended) != len(cases)+1 {
		t.Fatalf("%d spans after Refused, want %d", len(ended), len(cases)+1)
	}
	var before bool
	for _, kv := range ended[len(cases)].Attributes() {
		if kv.Key == "fencekit.guard.before_write" {
			before = kv.Value.AsBool()
		}
	}
	if !before {
		t.Errorf("Refused span without %s=true", "fencekit.guard.before_write")
	}
}

// TestWriteSpansOff: without a TracerProvider (and on a nil Recorder)
// Start returns ctx unchanged, End does nothing, and neither allocates.
func TestWriteSpansOff(t *testing.T) {
	r, err := guardobs.New(guardobs.Config{Kind: "etcd"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := fence.Claim{Token: 7, Run: "run-a"}
	for _, rec := range []*guardobs.Recorder{r, nil} {
		allocs := testing.AllocsPerRun(100, func() {
			wctx, sp := rec.Start(ctx, "doc", c)
			if wctx != ctx {
				t.Fatal("ctx changed")
			}
			sp.End(nil)
			rec.Refused(ctx, "doc", c, fence.ErrInvalidToken)
		})
		if allocs != 0 {
			t.Errorf("%v allocations per write with tracing off, want 0", allocs)
		}
	}
}
