package guardobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/fence"
)

// spanWrite is the name of the span of one guarded write (or fence
// statement): a child of the span in the write's ctx. docs/operations.md
// ("Tracing") lists its attributes; the name changes only in a release that
// says so.
const spanWrite = "fencekit.guard.write"

// Attribute keys of spanWrite. Unlike the guard instruments' one
// attribute, span attributes carry identifiers: the resource, the token and
// the run identity.
const (
	attrKind     = "fencekit.guard.kind"         // the guard's kind (the value of attrGuard on metrics)
	attrResource = "fencekit.guard.resource"     // the resource as the guard was given it
	attrToken    = "fencekit.guard.token"        //nolint:gosec // G101: an attribute key (the token the write presented, int64)
	attrRunID    = "fencekit.guard.run_id"       // the claim's run identity, when it has one
	attrScope    = "fencekit.guard.scope"        // the claim's scope, when it has one
	attrOutcome  = "fencekit.guard.outcome"      // one of the Outcome* values
	attrMark     = "fencekit.guard.mark.token"   // stale or reused: the resource's mark
	attrMarkRun  = "fencekit.guard.mark.run_id"  // reused: the run identity stored with the mark
	attrNotSent  = "fencekit.guard.before_write" // true when the write was refused before any I/O
)

// Values of attrOutcome, the outcome vocabulary of every guard.
const (
	outcomeAccepted       = "accepted"        // admitted (and, where the guard commits, committed)
	outcomeStale          = "stale"           // refused: token below the mark (fence.ErrStale)
	outcomeReused         = "reused"          // refused: token equal to the mark, other run (fence.ErrTokenReused)
	outcomeOutOfScope     = "out_of_scope"    // refused: resource outside the claim's scope (fence.ErrOutOfScope)
	outcomeBusy           = "busy"            // not written: contention, retry (fence.ErrBusy)
	outcomeOutcomeUnknown = "outcome_unknown" // sent, no reply: may have been applied (fence.ErrOutcomeUnknown)
	outcomeInvalid        = "invalid"         // bad input (resource, claim, no token in ctx): nothing written
	outcomeCanceled       = "canceled"        // the write's context was cancelled
	outcomeDeadline       = "deadline_exceeded"
	outcomeError          = "error" // the store failed, or the caller's write function returned an error
)

// Outcome names the outcome of a guarded write that returned err and
// reports whether it is a failure. Refusals the protocol defines (stale,
// reused, out of scope) and busy are decisions, not failures; an unknown
// outcome, bad input, the context ending and any other error are failures.
// A refusal wrapped with the context's error (fence.WrapContext) is still
// the refusal.
func Outcome(err error) (outcome string, failure bool) {
	switch {
	case err == nil:
		return outcomeAccepted, false
	case errors.Is(err, fence.ErrStale):
		return outcomeStale, false
	case errors.Is(err, fence.ErrTokenReused):
		return outcomeReused, false
	case errors.Is(err, fence.ErrOutOfScope):
		return outcomeOutOfScope, false
	case errors.Is(err, fence.ErrOutcomeUnknown):
		return outcomeOutcomeUnknown, true
	case errors.Is(err, fence.ErrBusy):
		return outcomeBusy, false
	case errors.Is(err, fence.ErrInvalidResource), errors.Is(err, fence.ErrInvalidToken),
		errors.Is(err, fence.ErrInvalidRun), errors.Is(err, fence.ErrInvalidScope), errors.Is(err, fence.ErrNoToken):
		return outcomeInvalid, true
	case errors.Is(err, context.DeadlineExceeded):
		return outcomeDeadline, true
	case errors.Is(err, context.Canceled):
		return outcomeCanceled, true
	}
	return outcomeError, true
}

// Span is the span of one guarded write, from [Recorder.Start]. The zero
// Span (tracing off, or a nil Recorder) does nothing.
type Span struct{ s trace.Span }

// Start starts the span of one guarded write to resource under claim c, as
// a child of the span in ctx, and returns ctx carrying it (for the store
// client's own spans). Without Config.TracerProvider it returns ctx and the
// zero Span, allocating nothing. End the span with [Span.End].
func (r *Recorder) Start(ctx context.Context, resource string, c fence.Claim) (context.Context, Span) {
	if r == nil || r.tracer == nil {
		return ctx, Span{}
	}
	kv := make([]attribute.KeyValue, 0, 5)
	kv = append(kv, attribute.String(attrKind, r.kind), attribute.String(attrResource, resource),
		attribute.Int64(attrToken, int64(c.Token)))
	if c.Run != "" {
		kv = append(kv, attribute.String(attrRunID, c.Run))
	}
	if c.Scope != "" {
		kv = append(kv, attribute.String(attrScope, c.Scope))
	}
	ctx, s := r.tracer.Start(ctx, spanWrite, trace.WithAttributes(kv...))
	return ctx, Span{s}
}

// End records the write's outcome (Outcome(err)) and ends the span. A stale
// or reused refusal adds the mark; a failure records err with status
// Error; a decision (accepted, stale, reused, out of scope, busy) leaves
// the status Unset.
func (s Span) End(err error) {
	if s.s == nil {
		return
	}
	outcome, failure := Outcome(err)
	s.s.SetAttributes(attribute.String(attrOutcome, outcome))
	if se, ok := fence.IsStale(err); ok {
		s.s.SetAttributes(attribute.Int64(attrMark, int64(se.Highest)))
	}
	if re, ok := fence.IsReused(err); ok {
		s.s.SetAttributes(attribute.Int64(attrMark, int64(re.Token)), attribute.String(attrMarkRun, re.MarkRun))
	}
	if failure {
		s.s.RecordError(err)
		s.s.SetStatus(codes.Error, err.Error())
	}
	s.s.End()
}

// Refused records the span of a write refused before any I/O (bad input,
// a resource outside the claim's scope) for guards that check their
// arguments before starting the write's span; nil err records nothing.
func (r *Recorder) Refused(ctx context.Context, resource string, c fence.Claim, err error) {
	if err == nil || r == nil || r.tracer == nil {
		return
	}
	_, s := r.Start(ctx, resource, c)
	s.s.SetAttributes(attribute.Bool(attrNotSent, true))
	s.End(err)
}

// spanMarksDelete is the name of the span of one housekeeping statement
// deleting guard marks (pgguard.Marks), with attrKind and attrMarksDeleted.
const spanMarksDelete = "fencekit.guard.marks_delete"

// attrMarksDeleted is the number of marks a spanMarksDelete statement
// deleted.
const attrMarksDeleted = "fencekit.guard.marks.deleted_count"

// Housekeeping records guard housekeeping (pgguard.Marks): the counter
// "fencekit.guard.marks.deleted" and one "fencekit.guard.marks_delete" span
// per delete statement. The zero Housekeeping records nothing.
type Housekeeping struct {
	tracer  trace.Tracer
	kind    string
	deleted metric.Int64Counter
	attrs   metric.MeasurementOption
}

// NewHousekeeping returns the Housekeeping of the guard kind (see
// Config.Kind) on mp and tp; nil mp records no count and nil tp no span. An
// error creating the counter is returned (matching fence.ErrInvalidConfig).
func NewHousekeeping(kind string, mp metric.MeterProvider, tp trace.TracerProvider) (Housekeeping, error) {
	if !kindRE.MatchString(kind) {
		return Housekeeping{}, configErr("Kind", fmt.Sprintf("%q: want 1 to 32 bytes of a-z, 0-9 and '_'", kind), nil)
	}
	h := Housekeeping{kind: kind, attrs: metric.WithAttributeSet(attribute.NewSet(attribute.String(attrGuard, kind)))}
	if mp != nil {
		c, err := mp.Meter(scopeName).Int64Counter(metricMarksDeleted, metric.WithUnit("{mark}"),
			metric.WithDescription("Guard marks deleted by housekeeping."))
		if err != nil {
			return Housekeeping{}, configErr("MeterProvider", "instruments", err)
		}
		h.deleted = c
	}
	if tp != nil {
		h.tracer = tp.Tracer(scopeName)
	}
	return h, nil
}

// Deleted records one housekeeping delete statement, started at start,
// that deleted n marks (added to the counter) or failed with err (counted
// nothing; its span gets status Error).
func (h Housekeeping) Deleted(ctx context.Context, start time.Time, n int64, err error) {
	if h.deleted != nil && err == nil {
		h.deleted.Add(ctx, n, h.attrs)
	}
	if h.tracer == nil {
		return
	}
	_, s := h.tracer.Start(ctx, spanMarksDelete, trace.WithTimestamp(start), trace.WithAttributes(
		attribute.String(attrKind, h.kind), attribute.Int64(attrMarksDeleted, n)))
	if err != nil {
		s.RecordError(err)
		s.SetStatus(codes.Error, err.Error())
	}
	s.End()
}
