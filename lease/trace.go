package lease

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/internal/obs"
	"github.com/fencekit/fencekit/lease/internal/traceoutcome"
	"github.com/fencekit/fencekit/lease/leasetrace"
)

// Span names, unexported for the call sites; the exported ones are in
// package leasetrace.
const (
	spanAcquire     = leasetrace.SpanAcquire
	spanAcquireWait = leasetrace.SpanAcquireWait
	spanTakeover    = leasetrace.SpanTakeover
	spanRelease     = leasetrace.SpanRelease
	spanRenew       = leasetrace.SpanRenew
	spanPark        = leasetrace.SpanPark
	spanResume      = leasetrace.SpanResume
)

// outcomeOf names err's outcome and says whether it is a failure (span
// status Error): refusals (held, unauthorized, token floor, unchecked node,
// busy) are answers, not failures; the database or network failing, the
// context ending, the Manager closed and bad input are failures. A loss
// (ErrLost, ErrTakenOver, ErrTrustExpired) is a failure of the run that
// held the lease.
func outcomeOf(err error, ok string) (string, bool) {
	switch {
	case err == nil:
		return ok, false
	case errors.Is(err, ErrInvalidKey), errors.Is(err, ErrInvalidHolder), errors.Is(err, ErrInvalidRunID):
		return traceoutcome.OutcomeInvalid, true
	case errors.Is(err, ErrUnauthorized):
		return traceoutcome.OutcomeUnauthorized, false
	case errors.Is(err, ErrBusy):
		return traceoutcome.OutcomeBusy, false
	case errors.Is(err, ErrTokenFloor):
		return traceoutcome.OutcomeTokenFloor, false
	case errors.Is(err, ErrFailoverUnchecked):
		return traceoutcome.OutcomeFailoverUnchecked, false
	case errors.Is(err, ErrClosed):
		return traceoutcome.OutcomeClosed, true
	case errors.Is(err, ErrTakenOver):
		return traceoutcome.OutcomeTakenOver, true
	case errors.Is(err, ErrLost), errors.Is(err, ErrTrustExpired):
		return traceoutcome.OutcomeLost, true
	case errors.Is(err, context.DeadlineExceeded): // before ErrHeld: an AcquireWait that gave up
		return traceoutcome.OutcomeDeadlineExceeded, true
	case errors.Is(err, context.Canceled):
		return traceoutcome.OutcomeCanceled, true
	case errors.Is(err, ErrHeld):
		return traceoutcome.OutcomeHeld, false
	case errors.Is(err, ErrRunActive):
		return traceoutcome.OutcomeRunActive, false
	}
	return traceoutcome.OutcomeError, true
}

// newTracer is the Manager's tracer: nil (tracing off) for a nil provider.
func newTracer(tp trace.TracerProvider) trace.Tracer { return obs.Tracer(tp) }

// span is one of the Manager's spans; the zero span (tracing off) does
// nothing and costs nothing.
type span struct{ s trace.Span }

// outerSpanKey holds, in the context of a Manager span, the span that was
// current before it: a lease's context keeps the caller's span, never the
// Manager's own (which ends when the call returns).
type outerSpanKey struct{}

// startSpan starts the span name for key (a zero Key adds no key
// attributes) when Config.TracerProvider is set; otherwise it returns ctx
// and the zero span without allocating.
func (m *Manager) startSpan(ctx context.Context, name string, key Key) (context.Context, span) {
	if m.tr == nil {
		return ctx, span{}
	}
	ctx = context.WithValue(ctx, outerSpanKey{}, trace.SpanFromContext(ctx))
	var opts []trace.SpanStartOption
	if key != (Key{}) {
		opts = append(opts, trace.WithAttributes(attribute.String(leasetrace.AttrAccountID, key.AccountID), attribute.String(leasetrace.AttrSessionID, key.SessionID)))
	}
	ctx, s := m.tr.Start(ctx, name, opts...)
	return ctx, span{s}
}

// end sets the outcome (from err, ok when err is nil), records err with
// status Error when it is a failure, and ends the span.
func (s span) end(err error, ok string) {
	if s.s == nil {
		return
	}
	outcome, failed := outcomeOf(err, ok)
	s.s.SetAttributes(attribute.String(leasetrace.AttrOutcome, outcome))
	if failed {
		s.s.RecordError(err)
		s.s.SetStatus(codes.Error, err.Error())
	}
	s.s.End()
}

// endGrant ends the span of a grant call with the lease's identity.
func (s span) endGrant(l *Lease, err error) {
	if s.s == nil {
		return
	}
	if l != nil {
		s.s.SetAttributes(attribute.String(leasetrace.AttrRunID, l.runID.String()), attribute.Int64(leasetrace.AttrToken, int64(l.token)))
		if l.holder != "" {
			s.s.SetAttributes(attribute.String(leasetrace.AttrHolder, l.holder))
		}
	}
	var held *HeldError
	if errors.As(err, &held) && held.RunID != uuid.Nil {
		s.s.SetAttributes(attribute.String(leasetrace.AttrHeldByRunID, held.RunID.String()), attribute.Int64(leasetrace.AttrHeldByToken, int64(held.Token)))
	}
	s.end(err, traceoutcome.OutcomeGranted)
}

// runSpan sets the run id (and token, when known) of a span.
func (s span) run(runID uuid.UUID, token int64) {
	if s.s == nil {
		return
	}
	s.s.SetAttributes(attribute.String(leasetrace.AttrRunID, runID.String()))
	if token > 0 {
		s.s.SetAttributes(attribute.Int64(leasetrace.AttrToken, token))
	}
}

// endRelease ends a Release span: the outcome is the ReleaseResult.
func (s span) endRelease(res ReleaseResult, err error) {
	if s.s == nil {
		return
	}
	if err == nil {
		s.s.SetAttributes(attribute.String(leasetrace.AttrOutcome, res.String()))
		s.s.End()
		return
	}
	s.end(err, "")
}

// endRenew ends a Renew span.
func (s span) endRenew(r Renewal, err error) {
	if s.s == nil {
		return
	}
	if err == nil {
		s.s.SetAttributes(attribute.Float64(leasetrace.AttrTrustDeadlineIn, time.Until(r.TrustDeadline).Seconds()))
	}
	s.end(err, traceoutcome.OutcomeRenewed)
}

// startBatch starts the span of one background renewal statement of n
// leases; it has no parent (the renewer runs on the Manager's context).
func (m *Manager) startBatch(ctx context.Context, n int) (context.Context, span) {
	if m.tr == nil {
		return ctx, span{}
	}
	ctx, s := m.tr.Start(ctx, leasetrace.SpanRenewBatch, trace.WithNewRoot(),
		trace.WithAttributes(attribute.Int(leasetrace.AttrBatchLeases, n)))
	return ctx, span{s}
}

// startHeartbeat starts leasetrace.SpanHeartbeat, a new trace, for one heartbeat
// statement of epoch id covering n leases.
func (m *Manager) startHeartbeat(ctx context.Context, id string, n int) (context.Context, span) {
	if m.tr == nil {
		return ctx, span{}
	}
	ctx, s := m.tr.Start(ctx, leasetrace.SpanHeartbeat, trace.WithNewRoot(),
		trace.WithAttributes(attribute.String(leasetrace.AttrManagerID, id), attribute.Int(leasetrace.AttrBatchLeases, n)))
	return ctx, span{s}
}

// endBatch ends a renewal batch span with its counts; err is the
// statement's failure (status Error), nil when it ran.
func (s span) endBatch(renewed, lost int, err error) {
	if s.s == nil {
		return
	}
	s.s.SetAttributes(attribute.Int(leasetrace.AttrBatchRenewed, renewed), attribute.Int(leasetrace.AttrBatchLost, lost))
	if err != nil {
		s.s.RecordError(err)
		s.s.SetStatus(codes.Error, err.Error())
	}
	s.s.End()
}

// traceLost records leasetrace.SpanLost for l, which ended with cause (metric cause
// mcause) between from and to, in the trace of the ctx it was acquired
// with.
func (m *Manager) traceLost(l *Lease, mcause string, cause error, from, to time.Time) {
	if m.tr == nil {
		return
	}
	_, s := m.tr.Start(l.ctx, leasetrace.SpanLost, trace.WithTimestamp(from), trace.WithAttributes(
		attribute.String(leasetrace.AttrAccountID, l.key.AccountID), attribute.String(leasetrace.AttrSessionID, l.key.SessionID),
		attribute.String(leasetrace.AttrRunID, l.runID.String()), attribute.Int64(leasetrace.AttrToken, int64(l.token)),
		attribute.String(leasetrace.AttrCause, mcause)))
	s.RecordError(cause)
	s.SetStatus(codes.Error, cause.Error())
	s.End(trace.WithTimestamp(to))
}

// outerContext returns ctx with the span that was current before the
// Manager's span started (ctx unchanged when there is none or tracing is
// off).
func (m *Manager) outerContext(ctx context.Context) context.Context {
	if m.tr == nil {
		return ctx
	}
	if s, ok := ctx.Value(outerSpanKey{}).(trace.Span); ok {
		return trace.ContextWithSpan(ctx, s)
	}
	return ctx
}

// traceDisplaced notes, on the Takeover span in ctx, the run it displaced.
func (m *Manager) traceDisplaced(ctx context.Context, run uuid.UUID) {
	if m.tr != nil {
		trace.SpanFromContext(ctx).SetAttributes(attribute.String(leasetrace.AttrDisplacedRunID, run.String()))
	}
}

// errRunPanicked is the error recorded on a Run span whose fn panicked.
var errRunPanicked = errors.New("lease: Run's fn panicked")

// tracedRun is Run inside a leasetrace.SpanRun span. fn's ctx carries the span, so
// the spans of guarded writes in fn are its children.
func (m *Manager) tracedRun(ctx context.Context, key Key, fn func(ctx context.Context, l *Lease) error, opts []Option) (err error) {
	ctx, sp := m.startSpan(ctx, leasetrace.SpanRun, key)
	var (
		held     *Lease
		fnErr    error
		panicked = true
	)
	defer func() {
		switch {
		case panicked:
			sp.s.SetAttributes(attribute.String(leasetrace.AttrOutcome, traceoutcome.OutcomeFnError))
			sp.s.RecordError(errRunPanicked)
			sp.s.SetStatus(codes.Error, errRunPanicked.Error())
			sp.s.End()
		case held == nil: // Acquire did not grant
			sp.end(err, "")
		case fnErr != nil && err == fnErr: //nolint:errorlint // identity: Run returned fn's error unwrapped (no loss)
			sp.s.SetAttributes(attribute.String(leasetrace.AttrOutcome, traceoutcome.OutcomeFnError))
			sp.s.RecordError(err)
			sp.s.SetStatus(codes.Error, err.Error())
			sp.s.End()
		default:
			sp.end(err, traceoutcome.OutcomeCompleted)
		}
	}()
	err = m.run(ctx, key, func(ctx context.Context, l *Lease) error {
		held = l
		sp.run(l.runID, int64(l.token))
		fnErr = fn(ctx, l)
		return fnErr
	}, opts)
	panicked = false
	return err
}
