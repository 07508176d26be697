package effects_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/effects"
	"github.com/fencekit/fencekit/effects/effectsobs"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/internal/obs/obstest"
)

// TestMetricsAndSpans runs every outcome through one Outbox and its Relay
// with the OpenTelemetry SDK's manual reader and span recorder: counts by
// target and reason, the delivery latency, the oldest-pending gauge while
// effects wait and at 0 once all are final, a record span per record as a
// child of the caller's span, a root deliver span per attempt, and no
// metric attribute carrying an identifier.
func TestMetricsAndSpans(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t)
	meter := obstest.NewMeter(t)
	spans := obstest.NewSpans(t)
	amo := effects.Target{Name: "amo", AtMostOnce: true, Deliverer: effects.DelivererFunc(
		func(context.Context, effects.Delivery) (effects.Result, error) {
			return effects.Result{}, errors.New("connection reset mid-send")
		})}
	o, err := effects.New(effects.Config{Pool: fencetest.Pool(t), Schema: e.schema, Targets: []effects.Target{httpTarget(), amo},
		AwaitPoll: 10 * time.Millisecond, MeterProvider: meter.Provider, TracerProvider: spans.Provider})
	require.NoError(t, err)

	key := e.key()
	m := e.manager()
	l, err := m.Acquire(bg(), key)
	require.NoError(t, err)
	callCtx, call := spans.Start(l.Context(), "tool-call")

	charge, err := o.Record(callCtx, tg.effect(t, "charge", `{"amount":1}`))
	require.NoError(t, err)
	missing := tg.effect(t, "missing", `{}`)
	missing.Request = mustFreeze(t, effects.HTTPRequest{Method: "POST", URL: tg.srv.URL + "/missing"})
	missingID, err := o.Record(callCtx, missing)
	require.NoError(t, err)
	cancelID, err := o.Record(callCtx, tg.effect(t, "cancel-me", `{}`))
	require.NoError(t, err)
	amoID, err := o.Record(callCtx, effects.Effect{Target: "amo", RequestKey: "mail", Request: []byte("hello")})
	require.NoError(t, err)
	again, err := o.Record(callCtx, tg.effect(t, "charge", `{"amount":1}`))
	require.NoError(t, err)
	require.Equal(t, charge, again)
	_, err = o.Record(callCtx, tg.effect(t, "charge", `{"amount":2}`))
	require.ErrorIs(t, err, effects.ErrConflict)
	require.NoError(t, o.Cancel(bg(), cancelID, "test"))
	call.End()

	old := claimOf(t, l)
	_, err = m.Takeover(bg(), key)
	require.NoError(t, err)
	_, err = o.Record(fence.WithClaim(bg(), old), tg.effect(t, "late", `{}`))
	require.ErrorIs(t, err, fence.ErrStale)

	// The relay's first claim waits until the gauge has been read with
	// the effects still pending.
	release := make(chan struct{})
	r, err := effects.NewRelay(o, effects.RelayConfig{Poll: 20 * time.Millisecond})
	require.NoError(t, err)
	effects.SetHooks(r, func(uuid.UUID, int64) { <-release }, nil)
	require.NoError(t, r.Start(bg()))
	t.Cleanup(func() { require.NoError(t, r.Stop()) })
	pts := meter.Collect()
	schema := map[string]string{effectsobs.AttrSchema: e.schema}
	require.Len(t, obstest.Find(pts, effectsobs.OldestPending, schema), 1)
	require.Positive(t, obstest.Value(pts, effectsobs.OldestPending, schema), "three effects are pending")
	close(release)
	for _, id := range []uuid.UUID{charge, missingID, amoID} {
		ctx, cancel := context.WithTimeout(bg(), 10*time.Second)
		in, err := o.Await(ctx, id)
		cancel()
		require.NoError(t, err)
		require.True(t, in.State.Final())
	}
	// Await may return on an outcome's NOTIFY before the relay counted
	// it; each attempt ends its span after counting.
	eventually(t, 10*time.Second, func() bool { return len(spans.Ended(effectsobs.SpanDeliver)) == 3 }, "three deliver spans ended")

	pay, amoAttr := map[string]string{effectsobs.AttrTarget: "pay"}, map[string]string{effectsobs.AttrTarget: "amo"}
	pts = meter.Collect()
	for _, c := range []struct {
		name  string
		attrs map[string]string
		want  float64
	}{
		{effectsobs.Recorded, pay, 3},
		{effectsobs.Recorded, amoAttr, 1},
		{effectsobs.Refused, map[string]string{effectsobs.AttrReason: effectsobs.ReasonStale}, 1},
		{effectsobs.Refused, map[string]string{effectsobs.AttrReason: effectsobs.ReasonConflict}, 1},
		{effectsobs.Attempts, pay, 2},
		{effectsobs.Attempts, amoAttr, 1},
		{effectsobs.Delivered, pay, 1},
		{effectsobs.Rejected, pay, 1},
		{effectsobs.Ambiguous, amoAttr, 1},
		{effectsobs.Canceled, nil, 1},
		{effectsobs.OldestPending, schema, 0},
	} {
		require.Equal(t, c.want, obstest.Value(pts, c.name, c.attrs), "%s %v", c.name, c.attrs)
	}
	lat := obstest.Find(pts, effectsobs.DeliveryLatency, pay)
	require.Len(t, lat, 1)
	require.Equal(t, uint64(1), lat[0].Count)
	require.Positive(t, lat[0].Sum)
	require.Less(t, lat[0].Sum, 30.0)
	require.Zero(t, obstest.Count(pts, effectsobs.DeliveryLatency, amoAttr))

	// No metric attribute names an effect, a request key, a lease key or
	// a run.
	allowed := map[string]bool{"pay": true, "amo": true, e.schema: true, effectsobs.ReasonStale: true, effectsobs.ReasonConflict: true}
	for _, p := range pts {
		for k, v := range p.Attrs {
			require.True(t, allowed[v], "metric %s attribute %s=%q", p.Name, k, v)
		}
	}

	// Spans: seven records, children of the caller's span but the late
	// one; one root deliver span per attempt.
	recs := spans.Ended(effectsobs.SpanRecord)
	require.Len(t, recs, 7)
	outcomes := map[string]int{}
	for _, sp := range recs {
		a := obstest.SpanAttrs(sp)
		outcomes[a[effectsobs.AttrOutcome]]++
		if a[effectsobs.AttrRequestKey] != "late" {
			require.True(t, obstest.ChildOf(sp, call.SpanContext()), "record span of %s", a[effectsobs.AttrRequestKey])
		}
		require.Equal(t, key.AccountID, a[effectsobs.AttrAccountID])
	}
	require.Equal(t, map[string]int{effectsobs.OutcomeRecorded: 4, effectsobs.OutcomeDuplicate: 1,
		effectsobs.OutcomeConflict: 1, effectsobs.OutcomeStale: 1}, outcomes)
	dels := spans.Ended(effectsobs.SpanDeliver)
	require.Len(t, dels, 3)
	got := map[string]string{}
	for _, sp := range dels {
		require.False(t, sp.Parent().IsValid(), "a deliver span is a root")
		a := obstest.SpanAttrs(sp)
		got[a[effectsobs.AttrEffectID]] = a[effectsobs.AttrOutcome]
		require.Equal(t, "1", a[effectsobs.AttrAttempt])
	}
	require.Equal(t, map[string]string{charge.String(): effectsobs.OutcomeDelivered,
		missingID.String(): effectsobs.OutcomeRejected, amoID.String(): effectsobs.OutcomeAmbiguous}, got)
}

// A retried attempt's span says retry; a relay's Stop unregisters the
// gauge (it is no longer observed).
func TestRetrySpanAndGaugeUnregistered(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t)
	tg.fail.Store(1)
	meter := obstest.NewMeter(t)
	spans := obstest.NewSpans(t)
	o, err := effects.New(effects.Config{Pool: fencetest.Pool(t), Schema: e.schema, Targets: []effects.Target{httpTarget()},
		AwaitPoll: 10 * time.Millisecond, MeterProvider: meter.Provider, TracerProvider: spans.Provider})
	require.NoError(t, err)
	l, err := e.manager().Acquire(bg(), e.key())
	require.NoError(t, err)
	id, err := o.Record(l.Context(), tg.effect(t, "r", `{}`))
	require.NoError(t, err)
	r, err := effects.NewRelay(o, effects.RelayConfig{Poll: 20 * time.Millisecond, RetryMin: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, r.Start(bg()))
	ctx, cancel := context.WithTimeout(bg(), 10*time.Second)
	defer cancel()
	in, err := o.Await(ctx, id)
	require.NoError(t, err)
	require.Equal(t, effects.StateDelivered, in.State)
	require.Len(t, obstest.Find(meter.Collect(), effectsobs.OldestPending, nil), 1)
	require.NoError(t, r.Stop())
	require.Empty(t, obstest.Find(meter.Collect(), effectsobs.OldestPending, nil))

	var outcomes []string
	for _, sp := range spans.Ended(effectsobs.SpanDeliver) {
		outcomes = append(outcomes, obstest.SpanAttrs(sp)[effectsobs.AttrOutcome])
	}
	require.Equal(t, []string{effectsobs.OutcomeRetry, effectsobs.OutcomeDelivered}, outcomes)
	pts := meter.Collect()
	require.Equal(t, 2.0, obstest.Value(pts, effectsobs.Attempts, nil))
	require.Equal(t, 1.0, obstest.Value(pts, effectsobs.Delivered, nil))
}

// A delivery attempt's span links to the span that recorded the effect
// (the effect row keeps the record span's traceparent), through a running
// relay and through DeliverEffect; an effect recorded without tracing is
// delivered by a tracing relay with no link. Spans from the OpenTelemetry
// SDK's in-memory recorder (tracetest.SpanRecorder).
func TestDeliverSpanLinksToRecordSpan(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t)
	spans := obstest.NewSpans(t)
	o, err := effects.New(effects.Config{Pool: fencetest.Pool(t), Schema: e.schema, Targets: []effects.Target{httpTarget()},
		AwaitPoll: 10 * time.Millisecond, TracerProvider: spans.Provider})
	require.NoError(t, err)
	untraced := e.outbox(httpTarget())
	l, err := e.manager().Acquire(bg(), e.key())
	require.NoError(t, err)
	callCtx, call := spans.Start(l.Context(), "tool-call")
	viaRelay, err := o.Record(callCtx, tg.effect(t, "via-relay", `{"amount":1}`))
	require.NoError(t, err)
	plain, err := untraced.Record(l.Context(), tg.effect(t, "untraced", `{"amount":2}`))
	require.NoError(t, err)
	call.End()

	r, err := effects.NewRelay(o, effects.RelayConfig{Poll: 20 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, r.Start(bg()))
	for _, id := range []uuid.UUID{viaRelay, plain} {
		ctx, cancel := context.WithTimeout(bg(), 10*time.Second)
		in, err := o.Await(ctx, id)
		cancel()
		require.NoError(t, err)
		require.Equal(t, effects.StateDelivered, in.State)
	}
	require.NoError(t, r.Stop())

	// DeliverEffect (a job queue's worker) with no relay running.
	byID, err := o.Record(callCtx, tg.effect(t, "by-id", `{"amount":3}`))
	require.NoError(t, err)
	one, err := effects.NewRelay(o, effects.RelayConfig{})
	require.NoError(t, err)
	res, err := one.DeliverEffect(bg(), byID)
	require.NoError(t, err)
	require.Equal(t, effects.StateDelivered, res.State)

	recorded := map[string]trace.SpanContext{}
	for _, sp := range spans.Ended(effectsobs.SpanRecord) {
		recorded[obstest.SpanAttrs(sp)[effectsobs.AttrEffectID]] = sp.SpanContext()
	}
	require.Len(t, recorded, 2, "the untraced Outbox records no span")
	dels := spans.Ended(effectsobs.SpanDeliver)
	require.Len(t, dels, 3)
	for _, sp := range dels {
		id := obstest.SpanAttrs(sp)[effectsobs.AttrEffectID]
		require.False(t, sp.Parent().IsValid(), "a deliver span is a root")
		if id == plain.String() {
			require.Empty(t, sp.Links(), "no record span to link to")
			continue
		}
		rec, ok := recorded[id]
		require.True(t, ok, "deliver span of %s", id)
		require.Len(t, sp.Links(), 1, "deliver span of %s", id)
		link := sp.Links()[0].SpanContext
		require.Equal(t, rec.TraceID(), link.TraceID(), "deliver span of %s", id)
		require.Equal(t, rec.SpanID(), link.SpanID(), "deliver span of %s", id)
		require.Equal(t, call.SpanContext().TraceID(), link.TraceID(), "the record span is in the caller's trace")
		require.NotEqual(t, rec.TraceID(), sp.SpanContext().TraceID(), "the deliver span roots a trace of its own")
	}
}

func mustFreeze(t *testing.T, r effects.HTTPRequest) []byte {
	t.Helper()
	b, err := r.Freeze()
	require.NoError(t, err)
	return b
}
