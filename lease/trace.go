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
)

// Span names of the Manager (Config.TracerProvider). docs/operations.md
// ("Tracing") lists each span with its attributes; the names change only in
// a release that says so.
const (
	// SpanAcquire is one Acquire call (with the automatic floor check and
	// its second statement, when one runs).
	SpanAcquire = "fencekit.lease.acquire"
	// SpanAcquireWait is one AcquireWait call, from entry to the grant or
	// the error, over every attempt.
	SpanAcquireWait = "fencekit.lease.acquire_wait"
	// SpanTakeover is one Takeover call.
	SpanTakeover = "fencekit.lease.takeover"
	// SpanRelease is one Release call (Manager.Release or Lease.Release).
	SpanRelease = "fencekit.lease.release"
	// SpanRenew is one explicit renewal (Manager.Renew or Lease.Renew).
	SpanRenew = "fencekit.lease.renew"
	// SpanRenewBatch is one background renewal statement; it starts a trace
	// of its own and counts the leases it carried.
	SpanRenewBatch = "fencekit.lease.renew_batch"
	// SpanHeartbeat is one heartbeat statement (heartbeat renewal mode),
	// renewing every lease of a Manager at once; like SpanRenewBatch it starts
	// a trace of its own, with AttrManagerID and the AttrBatch* counts.
	SpanHeartbeat = "fencekit.lease.heartbeat"
	// SpanRun is one Run call: its Acquire, fn (whose ctx carries this span,
	// so guarded writes in fn are its children) and the Release.
	SpanRun = "fencekit.lease.run"
	// SpanLost is the end of a lease by loss (taken over, renewal refused,
	// trust deadline passed), in the trace of the call that acquired it:
	// from the detection (or the trust deadline) to the cancellation of the
	// lease's context.
	SpanLost = "fencekit.lease.lost"
)

// Attribute keys of the Manager's spans. Unlike metric attributes, span
// attributes carry identifiers: the key's account and session ids, the run
// id and the token.
const (
	AttrAccountID       = "fencekit.lease.account_id"
	AttrSessionID       = "fencekit.lease.session_id"
	AttrRunID           = "fencekit.lease.run_id"
	AttrToken           = "fencekit.lease.token"            //nolint:gosec // G101: an attribute key, not a credential
	AttrHolder          = "fencekit.lease.holder"           // the grant's WithHolder label, when set
	AttrOutcome         = "fencekit.lease.outcome"          // one of the Outcome* values, or a ReleaseResult's String
	AttrDisplacedRunID  = "fencekit.lease.displaced_run_id" // Takeover: the run it displaced, when one held the key
	AttrHeldByRunID     = "fencekit.lease.held_by.run_id"   // outcome held: the holder's run id
	AttrHeldByToken     = "fencekit.lease.held_by.token"    //nolint:gosec // G101: an attribute key (outcome held: the holder's token)
	AttrCause           = "fencekit.lease.cause"            // SpanLost: taken_over, renewal_rejected, trust_deadline, database_error
	AttrManagerID       = "fencekit.lease.manager_id"       // SpanHeartbeat: the heartbeat epoch (fencekit_managers.manager_id)
	AttrBatchLeases     = "fencekit.lease.batch.leases"     // SpanRenewBatch, SpanHeartbeat: leases in the statement
	AttrBatchRenewed    = "fencekit.lease.batch.renewed"    // SpanRenewBatch: leases renewed
	AttrBatchLost       = "fencekit.lease.batch.lost"       // SpanRenewBatch: leases the database refused (each ends with a SpanLost)
	AttrTrustDeadlineIn = "fencekit.lease.trust_remaining"  // SpanRenew: seconds of trust after the renewal
)

// Values of AttrOutcome. A span's status is Error only for failures (see
// outcomeOf); a refusal the protocol defines is an outcome with status
// Unset.
const (
	OutcomeGranted           = "granted"            // Acquire, AcquireWait, Takeover
	OutcomeHeld              = "held"               // refused: another run holds the key
	OutcomeUnauthorized      = "unauthorized"       // refused by the Authorizer
	OutcomeTokenFloor        = "token_floor"        // refused: sequence not above the floor
	OutcomeFailoverUnchecked = "failover_unchecked" // refused: node not checked
	OutcomeBusy              = "busy"               // aborted for concurrency; retry
	OutcomeRenewed           = "renewed"            // Renew
	OutcomeLost              = "lost"               // Renew refused; Run's lease was lost
	OutcomeTakenOver         = "taken_over"         // Renew refused (or Run's lease ended) after a Takeover
	OutcomeCompleted         = "completed"          // Run: fn returned nil and the lease was held throughout
	OutcomeFnError           = "fn_error"           // Run: fn returned an error, the lease was held throughout
	OutcomeInvalid           = "invalid"            // bad input: nothing sent
	OutcomeClosed            = "closed"             // the Manager is closed
	OutcomeCanceled          = "canceled"           // the call's context was cancelled
	OutcomeDeadlineExceeded  = "deadline_exceeded"  // the call's context deadline passed
	OutcomeError             = "error"              // the database or the network failed
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
		return OutcomeInvalid, true
	case errors.Is(err, ErrUnauthorized):
		return OutcomeUnauthorized, false
	case errors.Is(err, ErrBusy):
		return OutcomeBusy, false
	case errors.Is(err, ErrTokenFloor):
		return OutcomeTokenFloor, false
	case errors.Is(err, ErrFailoverUnchecked):
		return OutcomeFailoverUnchecked, false
	case errors.Is(err, ErrClosed):
		return OutcomeClosed, true
	case errors.Is(err, ErrTakenOver):
		return OutcomeTakenOver, true
	case errors.Is(err, ErrLost), errors.Is(err, ErrTrustExpired):
		return OutcomeLost, true
	case errors.Is(err, context.DeadlineExceeded): // before ErrHeld: an AcquireWait that gave up
		return OutcomeDeadlineExceeded, true
	case errors.Is(err, context.Canceled):
		return OutcomeCanceled, true
	case errors.Is(err, ErrHeld):
		return OutcomeHeld, false
	}
	return OutcomeError, true
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
		opts = append(opts, trace.WithAttributes(attribute.String(AttrAccountID, key.AccountID), attribute.String(AttrSessionID, key.SessionID)))
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
	s.s.SetAttributes(attribute.String(AttrOutcome, outcome))
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
		s.s.SetAttributes(attribute.String(AttrRunID, l.runID.String()), attribute.Int64(AttrToken, int64(l.token)))
		if l.holder != "" {
			s.s.SetAttributes(attribute.String(AttrHolder, l.holder))
		}
	}
	var held *HeldError
	if errors.As(err, &held) && held.RunID != uuid.Nil {
		s.s.SetAttributes(attribute.String(AttrHeldByRunID, held.RunID.String()), attribute.Int64(AttrHeldByToken, int64(held.Token)))
	}
	s.end(err, OutcomeGranted)
}

// runSpan sets the run id (and token, when known) of a span.
func (s span) run(runID uuid.UUID, token int64) {
	if s.s == nil {
		return
	}
	s.s.SetAttributes(attribute.String(AttrRunID, runID.String()))
	if token > 0 {
		s.s.SetAttributes(attribute.Int64(AttrToken, token))
	}
}

// endRelease ends a Release span: the outcome is the ReleaseResult.
func (s span) endRelease(res ReleaseResult, err error) {
	if s.s == nil {
		return
	}
	if err == nil {
		s.s.SetAttributes(attribute.String(AttrOutcome, res.String()))
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
		s.s.SetAttributes(attribute.Float64(AttrTrustDeadlineIn, time.Until(r.TrustDeadline).Seconds()))
	}
	s.end(err, OutcomeRenewed)
}

// startBatch starts the span of one background renewal statement of n
// leases; it has no parent (the renewer runs on the Manager's context).
func (m *Manager) startBatch(ctx context.Context, n int) (context.Context, span) {
	if m.tr == nil {
		return ctx, span{}
	}
	ctx, s := m.tr.Start(ctx, SpanRenewBatch, trace.WithNewRoot(),
		trace.WithAttributes(attribute.Int(AttrBatchLeases, n)))
	return ctx, span{s}
}

// startHeartbeat starts SpanHeartbeat, a new trace, for one heartbeat
// statement of epoch id covering n leases.
func (m *Manager) startHeartbeat(ctx context.Context, id string, n int) (context.Context, span) {
	if m.tr == nil {
		return ctx, span{}
	}
	ctx, s := m.tr.Start(ctx, SpanHeartbeat, trace.WithNewRoot(),
		trace.WithAttributes(attribute.String(AttrManagerID, id), attribute.Int(AttrBatchLeases, n)))
	return ctx, span{s}
}

// endBatch ends a renewal batch span with its counts; err is the
// statement's failure (status Error), nil when it ran.
func (s span) endBatch(renewed, lost int, err error) {
	if s.s == nil {
		return
	}
	s.s.SetAttributes(attribute.Int(AttrBatchRenewed, renewed), attribute.Int(AttrBatchLost, lost))
	if err != nil {
		s.s.RecordError(err)
		s.s.SetStatus(codes.Error, err.Error())
	}
	s.s.End()
}

// traceLost records SpanLost for l, which ended with cause (metric cause
// mcause) between from and to, in the trace of the ctx it was acquired
// with.
func (m *Manager) traceLost(l *Lease, mcause string, cause error, from, to time.Time) {
	if m.tr == nil {
		return
	}
	_, s := m.tr.Start(l.ctx, SpanLost, trace.WithTimestamp(from), trace.WithAttributes(
		attribute.String(AttrAccountID, l.key.AccountID), attribute.String(AttrSessionID, l.key.SessionID),
		attribute.String(AttrRunID, l.runID.String()), attribute.Int64(AttrToken, int64(l.token)),
		attribute.String(AttrCause, mcause)))
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
		trace.SpanFromContext(ctx).SetAttributes(attribute.String(AttrDisplacedRunID, run.String()))
	}
}

// errRunPanicked is the error recorded on a Run span whose fn panicked.
var errRunPanicked = errors.New("lease: Run's fn panicked")

// tracedRun is Run inside a SpanRun span. fn's ctx carries the span, so
// the spans of guarded writes in fn are its children.
func (m *Manager) tracedRun(ctx context.Context, key Key, fn func(ctx context.Context, l *Lease) error, opts []Option) (err error) {
	ctx, sp := m.startSpan(ctx, SpanRun, key)
	var (
		held     *Lease
		fnErr    error
		panicked = true
	)
	defer func() {
		switch {
		case panicked:
			sp.s.SetAttributes(attribute.String(AttrOutcome, OutcomeFnError))
			sp.s.RecordError(errRunPanicked)
			sp.s.SetStatus(codes.Error, errRunPanicked.Error())
			sp.s.End()
		case held == nil: // Acquire did not grant
			sp.end(err, "")
		case fnErr != nil && err == fnErr: //nolint:errorlint // identity: Run returned fn's error unwrapped (no loss)
			sp.s.SetAttributes(attribute.String(AttrOutcome, OutcomeFnError))
			sp.s.RecordError(err)
			sp.s.SetStatus(codes.Error, err.Error())
			sp.s.End()
		default:
			sp.end(err, OutcomeCompleted)
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
