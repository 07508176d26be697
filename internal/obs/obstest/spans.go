package obstest

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// Spans is an SDK TracerProvider whose ended spans are kept in memory.
type Spans struct {
	Provider *sdktrace.TracerProvider
	rec      *tracetest.SpanRecorder
}

// NewSpans returns Spans shut down at cleanup.
func NewSpans(t testing.TB) *Spans {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return &Spans{Provider: tp, rec: rec}
}

// Start starts a span of the test's own (the caller's span in a trace).
func (s *Spans) Start(ctx context.Context, name string) (context.Context, trace.Span) {
	return s.Provider.Tracer("test").Start(ctx, name)
}

// Ended returns the ended spans called name (all when name is ""), oldest
// first.
func (s *Spans) Ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, sp := range s.rec.Ended() {
		if name == "" || sp.Name() == name {
			out = append(out, sp)
		}
	}
	return out
}

// SpanAttrs returns a span's attributes as strings.
func SpanAttrs(sp sdktrace.ReadOnlySpan) map[string]string { return attrMap(sp.Attributes()) }

// ChildOf reports whether sp is a child of parent.
func ChildOf(sp sdktrace.ReadOnlySpan, parent trace.SpanContext) bool {
	return sp.SpanContext().TraceID() == parent.TraceID() && sp.Parent().SpanID() == parent.SpanID()
}
