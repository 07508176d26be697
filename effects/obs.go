package effects

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/effects/effectsobs"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/obs"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// The names of every instrument, span, attribute key and attribute value
// are constants of package effects/effectsobs.

// latencyBuckets reach from a relay woken at once (milliseconds) to
// retries with backoff (minutes, hours).
var latencyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// observer holds an Outbox's instruments and tracer. Built from nil
// providers it records into the no-op meter and starts no span.
type observer struct {
	meter                                                   metric.Meter
	tracer                                                  trace.Tracer // nil: tracing off
	recorded, refused, attempts, delivered, rejected, ambig metric.Int64Counter
	canceled                                                metric.Int64Counter
	latency                                                 metric.Float64Histogram
	byTarget                                                map[string]metric.MeasurementOption
	refusedStale, refusedConflict, schemaAttr, noAttrs      metric.MeasurementOption
	oldestSQL                                               string
}

func attrs(kv ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(kv...))
}

func newObserver(mp metric.MeterProvider, tp trace.TracerProvider, schema string, targets map[string]Target) (*observer, error) {
	q, err := migrations.QuoteIdentifier(schema)
	if err != nil {
		return nil, err
	}
	m := obs.Meter(mp)
	x := &observer{
		meter: m, tracer: obs.Tracer(tp), byTarget: make(map[string]metric.MeasurementOption, len(targets)),
		refusedStale:    attrs(attribute.String(effectsobs.AttrReason, effectsobs.ReasonStale)),
		refusedConflict: attrs(attribute.String(effectsobs.AttrReason, effectsobs.ReasonConflict)),
		schemaAttr:      attrs(attribute.String(effectsobs.AttrSchema, schema)),
		noAttrs:         attrs(),
		oldestSQL: `SELECT coalesce(extract(epoch FROM clock_timestamp() - min(e.created_at)), 0)::float8
  FROM ` + q + `.fencekit_effects e WHERE e.final_at IS NULL`,
	}
	for n := range targets {
		x.byTarget[n] = attrs(attribute.String(effectsobs.AttrTarget, n))
	}
	var errs [8]error
	x.recorded, errs[0] = m.Int64Counter(effectsobs.Recorded, metric.WithUnit("{effect}"),
		metric.WithDescription("Effects inserted by Record/RecordTx (RecordTx: the caller's transaction may still roll back), by target."))
	x.refused, errs[1] = m.Int64Counter(effectsobs.Refused, metric.WithUnit("{call}"),
		metric.WithDescription("Records refused after the input checks (stale claim, conflicting request key), by reason."))
	x.attempts, errs[2] = m.Int64Counter(effectsobs.Attempts, metric.WithUnit("{attempt}"),
		metric.WithDescription("Delivery attempts (effects claimed by a relay), by target."))
	x.delivered, errs[3] = m.Int64Counter(effectsobs.Delivered, metric.WithUnit("{effect}"),
		metric.WithDescription("Effects a relay wrote delivered, by target."))
	x.rejected, errs[4] = m.Int64Counter(effectsobs.Rejected, metric.WithUnit("{effect}"),
		metric.WithDescription("Effects a relay wrote rejected, by target."))
	x.ambig, errs[5] = m.Int64Counter(effectsobs.Ambiguous, metric.WithUnit("{effect}"),
		metric.WithDescription("Effects a relay wrote ambiguous, by target."))
	x.canceled, errs[6] = m.Int64Counter(effectsobs.Canceled, metric.WithUnit("{effect}"),
		metric.WithDescription("Effects canceled by Cancel or CancelDisplaced."))
	x.latency, errs[7] = m.Float64Histogram(effectsobs.DeliveryLatency, metric.WithUnit("s"),
		metric.WithDescription("From an effect's record to its delivered outcome, by target."),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, &fence.ConfigError{Source: "effects", Field: "MeterProvider", Reason: err.Error(), Err: err}
	}
	return x, nil
}

func (x *observer) target(name string) metric.MeasurementOption {
	if a, ok := x.byTarget[name]; ok {
		return a
	}
	return x.noAttrs
}

// recordSpan is the span of one record; the zero value (tracing off)
// does nothing.
type recordSpan struct{ s trace.Span }

// startRecord starts SpanRecord as a child of ctx's span when tracing is
// on.
func (x *observer) startRecord(ctx context.Context, key lease.Key, claim fence.Claim, e Effect) (context.Context, recordSpan) {
	if x.tracer == nil {
		return ctx, recordSpan{}
	}
	ctx, s := x.tracer.Start(ctx, effectsobs.SpanRecord, trace.WithAttributes(
		attribute.String(effectsobs.AttrTargetName, e.Target),
		attribute.String(effectsobs.AttrRequestKey, e.RequestKey),
		attribute.String(effectsobs.AttrAccountID, key.AccountID),
		attribute.String(effectsobs.AttrSessionID, key.SessionID),
		attribute.String(effectsobs.AttrRunID, claim.Run),
		attribute.Int64(effectsobs.AttrToken, int64(claim.Token))))
	return ctx, recordSpan{s}
}

// traceparent is the W3C traceparent of the record's span, stored with the
// effect so that its delivery spans link to it; nil when tracing is off
// or the span context is invalid (a no-op provider).
func (sp recordSpan) traceparent(ctx context.Context) *string {
	if sp.s == nil {
		return nil
	}
	sc := sp.s.SpanContext()
	if !sc.IsValid() {
		return nil
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(ctx, sc), c)
	tp := c.Get(traceparentHeader)
	if tp == "" {
		return nil
	}
	return &tp
}

// traceparentHeader is the W3C Trace Context header the effect row stores.
const traceparentHeader = "traceparent"

// recordLink returns the link from a delivery span to the record span
// whose traceparent the effect row stored; false when the row has none
// (recorded without tracing) or it does
// not parse.
func recordLink(traceparent *string) (trace.Link, bool) {
	if traceparent == nil || *traceparent == "" {
		return trace.Link{}, false
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{traceparentHeader: *traceparent})
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return trace.Link{}, false
	}
	return trace.Link{SpanContext: sc}, true
}

// endRecord counts the record's result and ends its span.
func (x *observer) endRecord(ctx context.Context, sp recordSpan, target string, id uuid.UUID, dup bool, err error) {
	var outcome string
	failure := false
	switch {
	case err == nil && dup:
		outcome = effectsobs.OutcomeDuplicate
	case err == nil:
		outcome = effectsobs.OutcomeRecorded
		x.recorded.Add(ctx, 1, x.target(target))
	case errors.Is(err, fence.ErrStale):
		outcome = effectsobs.OutcomeStale
		x.refused.Add(ctx, 1, x.refusedStale)
	case errors.Is(err, fence.ErrTokenReused):
		outcome = effectsobs.OutcomeReused
		x.refused.Add(ctx, 1, x.refusedStale)
	case errors.Is(err, ErrConflict):
		outcome = effectsobs.OutcomeConflict
		x.refused.Add(ctx, 1, x.refusedConflict)
	case errors.Is(err, fence.ErrBusy):
		outcome = effectsobs.OutcomeBusy
	default:
		outcome, failure = effectsobs.OutcomeError, true
	}
	if sp.s == nil {
		return
	}
	sp.s.SetAttributes(attribute.String(effectsobs.AttrOutcome, outcome))
	if id != uuid.Nil {
		sp.s.SetAttributes(attribute.String(effectsobs.AttrEffectID, id.String()))
	}
	var ce *ConflictError
	if errors.As(err, &ce) {
		sp.s.SetAttributes(attribute.String(effectsobs.AttrEffectID, ce.Existing.String()))
	}
	if failure {
		sp.s.RecordError(err)
		sp.s.SetStatus(codes.Error, err.Error())
	}
	sp.s.End()
}

// deliverSpanKey holds an attempt's span in the attempt's context, for the
// outcome writes (finish, retry) to record their outcome on it.
type deliverSpanKey struct{}

// startAttempt counts one attempt and, when tracing is on, starts its
// SpanDeliver: a root (a relay's context carries no caller's span), linked
// to the record's span when the effect row stored its traceparent, that
// the returned ctx carries to the Deliverer and the outcome write.
func (x *observer) startAttempt(ctx context.Context, relay string, c claimed) (context.Context, func()) {
	x.attempts.Add(ctx, 1, x.target(c.target))
	if x.tracer == nil {
		return ctx, func() {}
	}
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithAttributes(
		attribute.String(effectsobs.AttrEffectID, c.id.String()),
		attribute.String(effectsobs.AttrTargetName, c.target),
		attribute.Int(effectsobs.AttrAttempt, c.attempts),
		attribute.Int64(effectsobs.AttrEpoch, c.epoch),
		attribute.String(effectsobs.AttrRelay, relay))}
	if l, ok := recordLink(c.traceparent); ok {
		opts = append(opts, trace.WithLinks(l))
	}
	ctx, s := x.tracer.Start(ctx, effectsobs.SpanDeliver, opts...)
	return context.WithValue(ctx, deliverSpanKey{}, s), func() { s.End() }
}

// attemptOutcome records an attempt's outcome write on its span (when
// tracing is on) and, for a written final state, the counters and the
// delivery latency. written is false when nothing was written: err nil
// means another claim took the effect over (superseded), otherwise the
// write failed.
func (x *observer) attemptOutcome(ctx context.Context, c claimed, outcome string, written bool, err error) {
	if written {
		opt := x.target(c.target)
		switch outcome {
		case effectsobs.OutcomeDelivered:
			x.delivered.Add(ctx, 1, opt)
			lat := c.now.Sub(c.created) + time.Since(c.started)
			x.latency.Record(ctx, lat.Seconds(), opt)
		case effectsobs.OutcomeRejected:
			x.rejected.Add(ctx, 1, opt)
		case effectsobs.OutcomeAmbiguous:
			x.ambig.Add(ctx, 1, opt)
		}
	}
	s, _ := ctx.Value(deliverSpanKey{}).(trace.Span)
	if s == nil {
		return
	}
	switch {
	case written:
	case err == nil:
		outcome = effectsobs.OutcomeSuperseded
	default:
		outcome = effectsobs.OutcomeAbandoned
		s.RecordError(err)
		s.SetStatus(codes.Error, "outcome not written: "+err.Error())
	}
	s.SetAttributes(attribute.String(effectsobs.AttrOutcome, outcome))
}

// canceledN counts n canceled effects.
func (x *observer) canceledN(ctx context.Context, n int) {
	if n > 0 {
		x.canceled.Add(ctx, int64(n), x.noAttrs)
	}
}

// registerOldest registers the OldestPending gauge's callback, reading the
// table through o's pool; the registration is undone by Unregister.
func (x *observer) registerOldest(o *Outbox) (metric.Registration, error) {
	g, err := x.meter.Float64ObservableGauge(effectsobs.OldestPending, metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest effect not yet final (pending or sending), 0 when none, by schema."))
	if err != nil {
		return nil, err
	}
	return x.meter.RegisterCallback(func(ctx context.Context, ob metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		var age float64
		if err := o.pool.QueryRow(ctx, x.oldestSQL).Scan(&age); err != nil {
			return fmt.Errorf("effects: %s: %w", effectsobs.OldestPending, err)
		}
		ob.ObserveFloat64(g, age, x.schemaAttr)
		return nil
	}, g)
}

// ignoreNoRows maps pgx.ErrNoRows (an outcome write that matched no row:
// superseded) to nil.
func ignoreNoRows(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	return err
}
