package leaseops

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// spanJanitorSweep is the name of the span of one Janitor.Sweep (the
// background loop's sweeps are root spans), with the attrJanitor* counts.
// docs/operations.md ("Tracing") lists every span of fencekit.
const spanJanitorSweep = "fencekit.lease.janitor_sweep"

// Attribute keys of spanJanitorSweep.
const (
	attrJanitorLeases    = "fencekit.lease.janitor.leases_deleted"    // fencekit_leases rows deleted
	attrJanitorDisplaced = "fencekit.lease.janitor.displaced_deleted" // fencekit_displaced rows deleted
	attrJanitorBatches   = "fencekit.lease.janitor.batches"           // statements sent
	attrJanitorMore      = "fencekit.lease.janitor.more"              // MaxBatches stopped the sweep
)

// startSweep starts a sweep's span; the zero span when tracing is off.
func (j *Janitor) startSweep(ctx context.Context) (context.Context, trace.Span) {
	if j.tracer == nil {
		return ctx, nil
	}
	return j.tracer.Start(ctx, spanJanitorSweep)
}

// endSweep ends a sweep's span with its result; err sets status Error.
func endSweep(s trace.Span, res SweepResult, err error) {
	if s == nil {
		return
	}
	s.SetAttributes(attribute.Int64(attrJanitorLeases, res.Deleted), attribute.Int64(attrJanitorDisplaced, res.Displaced),
		attribute.Int(attrJanitorBatches, res.Batches), attribute.Bool(attrJanitorMore, res.More))
	if err != nil {
		s.RecordError(err)
		s.SetStatus(codes.Error, err.Error())
	}
	s.End()
}
