// Package obs holds what the lease packages share for OpenTelemetry: the
// instrumentation scope and nil-safe meter and tracer lookups. The names of
// the lease's instruments live in lease/internal/leasemetrics (documented in
// docs/operations.md), the
// guards' instruments and their names in guards/guardobs.
//
// Guaranteed: the meter comes from the caller's metric.MeterProvider (nil
// means the no-op provider, so nothing is recorded); the tracer from the
// caller's trace.TracerProvider (nil means no tracer: the caller records no
// span and does no work for one). Not guaranteed: that a
// measurement reaches an exporter — that is the SDK's business.
package obs

import (
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
)

// Scope is the instrumentation scope name of every fencekit meter.
const Scope = "github.com/fencekit/fencekit"

// Meter returns the fencekit meter of mp, or a no-op meter when mp is nil.
func Meter(mp metric.MeterProvider) metric.Meter {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	return mp.Meter(Scope)
}

// Tracer returns the fencekit tracer of tp, or nil when tp is nil: callers
// skip span work entirely then, so that tracing off costs nothing.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(Scope)
}
