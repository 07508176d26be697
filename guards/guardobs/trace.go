package guardobs

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/fence"
)

// SpanWrite is the name of the span of one guarded write (or fence
// statement): a child of the span in the write's ctx. docs/operations.md
// ("Tracing") lists its attributes; the name changes only in a release that
// says so.
const SpanWrite = "fencekit.guard.write"

// Attribute keys of SpanWrite. Unlike the guard instruments' one
// attribute, span attributes carry identifiers: the resource, the token and
// the run identity.
const (
	AttrKind     = "fencekit.guard.kind"         // the guard's kind (the value of AttrGuard on metrics)
	AttrResource = "fencekit.guard.resource"     // the resource as the guard was given it
	AttrToken    = "fencekit.guard.token"        //nolint:gosec // G101: an attribute key (the token the write presented, int64)
	AttrRunID    = "fencekit.guard.run_id"       // the claim's run identity, when it has one
	AttrScope    = "fencekit.guard.scope"        // the claim's scope, when it has one
	AttrOutcome  = "fencekit.guard.outcome"      // one of the Outcome* values
	AttrMark     = "fencekit.guard.mark.token"   // stale or reused: the resource's mark
	AttrMarkRun  = "fencekit.guard.mark.run_id"  // reused: the run identity stored with the mark
	AttrNotSent  = "fencekit.guard.before_write" // true when the write was refused before any I/O
)

// Values of AttrOutcome, the outcome vocabulary of every guard.
const (
	OutcomeAccepted       = "accepted"        // admitted (and, where the guard commits, committed)
	OutcomeStale          = "stale"           // refused: token below the mark (fence.ErrStale)
	OutcomeReused         = "reused"          // refused: token equal to the mark, other run (fence.ErrTokenReused)
	OutcomeOutOfScope     = "out_of_scope"    // refused: resource outside the claim's scope (fence.ErrOutOfScope)
	OutcomeBusy           = "busy"            // not written: contention, retry (fence.ErrBusy)
	OutcomeOutcomeUnknown = "outcome_unknown" // sent, no reply: may have been applied (fence.ErrOutcomeUnknown)
	OutcomeInvalid        = "invalid"         // bad input (resource, claim, no token in ctx): nothing written
	OutcomeCanceled       = "canceled"        // the write's context was cancelled
	OutcomeDeadline       = "deadline_exceeded"
	OutcomeError          = "error" // the store failed, or the caller's write function returned an error
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
		return OutcomeAccepted, false
	case errors.Is(err, fence.ErrStale):
		return OutcomeStale, false
	case errors.Is(err, fence.ErrTokenReused):
		return OutcomeReused, false
	case errors.Is(err, fence.ErrOutOfScope):
		return OutcomeOutOfScope, false
	case errors.Is(err, fence.ErrOutcomeUnknown):
		return OutcomeOutcomeUnknown, true
	case errors.Is(err, fence.ErrBusy):
		return OutcomeBusy, false
	case errors.Is(err, fence.ErrInvalidResource), errors.Is(err, fence.ErrInvalidToken),
		errors.Is(err, fence.ErrInvalidRun), errors.Is(err, fence.ErrInvalidScope), errors.Is(err, fence.ErrNoToken):
		return OutcomeInvalid, true
	case errors.Is(err, context.DeadlineExceeded):
		return OutcomeDeadline, true
	case errors.Is(err, context.Canceled):
		return OutcomeCanceled, true
	}
	return OutcomeError, true
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
	kv = append(kv, attribute.String(AttrKind, r.kind), attribute.String(AttrResource, resource),
		attribute.Int64(AttrToken, int64(c.Token)))
	if c.Run != "" {
		kv = append(kv, attribute.String(AttrRunID, c.Run))
	}
	if c.Scope != "" {
		kv = append(kv, attribute.String(AttrScope, c.Scope))
	}
	ctx, s := r.tracer.Start(ctx, SpanWrite, trace.WithAttributes(kv...))
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
	s.s.SetAttributes(attribute.String(AttrOutcome, outcome))
	if se, ok := fence.IsStale(err); ok {
		s.s.SetAttributes(attribute.Int64(AttrMark, int64(se.Highest)))
	}
	if re, ok := fence.IsReused(err); ok {
		s.s.SetAttributes(attribute.Int64(AttrMark, int64(re.Token)), attribute.String(AttrMarkRun, re.MarkRun))
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
	s.s.SetAttributes(attribute.Bool(AttrNotSent, true))
	s.End(err)
}

// SpanMarksDelete is the name of the span of one housekeeping statement
// deleting guard marks (pgguard.Marks), with AttrKind and AttrMarksDeleted.
const SpanMarksDelete = "fencekit.guard.marks_delete"

// AttrMarksDeleted is the number of marks a SpanMarksDelete statement
// deleted.
const AttrMarksDeleted = "fencekit.guard.marks.deleted_count"

// Housekeeping records SpanMarksDelete spans for guard housekeeping
// (pgguard.Marks). The zero Housekeeping (nil TracerProvider) records
// nothing.
type Housekeeping struct{ tracer trace.Tracer }

// NewHousekeeping returns the Housekeeping of tp; nil tp records nothing.
func NewHousekeeping(tp trace.TracerProvider) Housekeeping {
	if tp == nil {
		return Housekeeping{}
	}
	return Housekeeping{tracer: tp.Tracer(Scope)}
}

// Deleted records one SpanMarksDelete span of kind's housekeeping, started
// at start, that deleted n marks or failed with err (status Error).
func (h Housekeeping) Deleted(ctx context.Context, kind string, start time.Time, n int64, err error) {
	if h.tracer == nil {
		return
	}
	_, s := h.tracer.Start(ctx, SpanMarksDelete, trace.WithTimestamp(start), trace.WithAttributes(
		attribute.String(AttrKind, kind), attribute.Int64(AttrMarksDeleted, n)))
	if err != nil {
		s.RecordError(err)
		s.SetStatus(codes.Error, err.Error())
	}
	s.End()
}
