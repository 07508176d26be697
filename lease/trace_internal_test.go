package lease

import (
	"context"
	"testing"

	"github.com/google/uuid"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// traceSteps is the span work Acquire and Lease.Release add to a lease
// cycle: the Acquire span (started, handed to newLease, ended with the
// grant) and the Release span.
func traceSteps(m *Manager, ctx context.Context, key Key, l *Lease) {
	actx, sp := m.startSpan(ctx, spanAcquire, key)
	_ = m.outerContext(actx)
	sp.endGrant(l, nil)
	_, rs := m.startSpan(ctx, spanRelease, key)
	rs.run(l.runID, int64(l.token))
	rs.endRelease(ReleaseDone, nil)
}

// TestTraceOffAllocatesNothing: without a TracerProvider the span work of
// a lease cycle allocates nothing.
func TestTraceOffAllocatesNothing(t *testing.T) {
	m := &Manager{}
	key := Key{AccountID: "a", SessionID: "s"}
	l := &Lease{key: key, runID: uuid.New(), token: 7}
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() { traceSteps(m, ctx, key, l) }); n != 0 {
		t.Fatalf("%v allocations per lease cycle with tracing off, want 0", n)
	}
}

// BenchmarkTraceSteps measures the span work of one lease cycle, with
// tracing off (nil TracerProvider) and on (the SDK, always sampling, spans
// kept in memory and dropped every 4096).
func BenchmarkTraceSteps(b *testing.B) {
	key := Key{AccountID: "a", SessionID: "s"}
	l := &Lease{key: key, runID: uuid.New(), token: 7}
	ctx := context.Background()
	b.Run("off", func(b *testing.B) {
		m := &Manager{}
		b.ReportAllocs()
		for b.Loop() {
			traceSteps(m, ctx, key, l)
		}
	})
	b.Run("on", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
		defer func() { _ = tp.Shutdown(ctx) }()
		m := &Manager{tr: newTracer(tp)}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			traceSteps(m, ctx, key, l)
			if i++; i%4096 == 0 {
				b.StopTimer()
				_ = tp.Shutdown(ctx)
				tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
				m.tr = newTracer(tp)
				b.StartTimer()
			}
		}
	})
}
