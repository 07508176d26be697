package lease

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/fencekit/fencekit/internal/obs"
	"github.com/fencekit/fencekit/lease/internal/leasemetrics"
)

// The names of every instrument, attribute key and attribute value are
// constants of package lease/internal/leasemetrics; docs/operations.md
// lists them.

// metrics holds a Manager's instruments. Built from a nil MeterProvider it
// records into the OpenTelemetry no-op implementation.
type metrics struct {
	acquired, refused, lost, released metric.Int64Counter
	acquireDur, waitDur               metric.Float64Histogram
	renewDur, renewFrac               metric.Float64Histogram
	cancelDelay, overrun              metric.Float64Histogram
	held                              metric.Int64UpDownCounter
	probesLost                        metric.Int64Counter
	fallback                          metric.Int64UpDownCounter
	hbStarted, hbLost                 metric.Int64Counter
	lostAttrs                         map[string]metric.MeasurementOption     // by cause, built once: a heartbeat may end a million leases at once
	releasedAttrs                     [ReleaseNotFound + 1][]metric.AddOption // by result, built once (with the slice Add takes): one per lease cycle
	releasedError                     []metric.AddOption
	ttl                               time.Duration
}

var latencyBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// waitBuckets reach further: a waiter may wait for a holder's whole run.
var waitBuckets = []float64{0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900}

func attrs(kv ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(kv...))
}

func newMetrics(mp metric.MeterProvider, ttl time.Duration) (*metrics, error) {
	m := obs.Meter(mp)
	x := &metrics{ttl: ttl, lostAttrs: map[string]metric.MeasurementOption{}}
	for _, c := range []string{leasemetrics.CauseRenewalRejected, leasemetrics.CauseTrustDeadline, leasemetrics.CauseDatabaseError, leasemetrics.CauseTakenOver} {
		x.lostAttrs[c] = attrs(attribute.String("cause", c))
	}
	for r := ReleaseDone; r <= ReleaseNotFound; r++ {
		x.releasedAttrs[r] = []metric.AddOption{attrs(attribute.String(leasemetrics.AttrResult, r.String()))}
	}
	x.releasedError = []metric.AddOption{attrs(attribute.String(leasemetrics.AttrResult, leasemetrics.ResultError))}
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	var err error
	x.acquired, err = m.Int64Counter(leasemetrics.Acquired, metric.WithUnit("{lease}"),
		metric.WithDescription("Leases granted."))
	add(err)
	x.refused, err = m.Int64Counter(leasemetrics.Refused, metric.WithUnit("{attempt}"),
		metric.WithDescription("Acquire attempts that did not grant a lease, by reason."))
	add(err)
	x.lost, err = m.Int64Counter(leasemetrics.Lost, metric.WithUnit("{lease}"),
		metric.WithDescription("Leases that ended without Release or Close, by cause."))
	add(err)
	x.released, err = m.Int64Counter(leasemetrics.Released, metric.WithUnit("{call}"),
		metric.WithDescription("Release statements, by result."))
	add(err)
	x.acquireDur, err = m.Float64Histogram(leasemetrics.AcquireDuration, metric.WithUnit("s"),
		metric.WithDescription("Round trip of each acquire or takeover statement (AcquireWait: each attempt); error.type when it granted nothing."),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	add(err)
	x.waitDur, err = m.Float64Histogram(leasemetrics.WaitDuration, metric.WithUnit("s"),
		metric.WithDescription("How long each AcquireWait call took, to the grant or the error; error.type when it failed."),
		metric.WithExplicitBucketBoundaries(waitBuckets...))
	add(err)
	x.renewDur, err = m.Float64Histogram(leasemetrics.RenewalDuration, metric.WithUnit("s"),
		metric.WithDescription("Round trip of each renewal statement (batched or single), by outcome."),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	add(err)
	x.renewFrac, err = m.Float64Histogram(leasemetrics.RenewalTTLFraction, metric.WithUnit("1"),
		metric.WithDescription("Renewal round trip divided by the TTL."),
		metric.WithExplicitBucketBoundaries(0.001, 0.01, 0.05, 0.1, 0.2, 0.33, 0.5, 0.8, 1))
	add(err)
	x.cancelDelay, err = m.Float64Histogram(leasemetrics.LossCancelDelay, metric.WithUnit("s"),
		metric.WithDescription("From the trust deadline (or the refused renewal's reply) to the lease context being cancelled."),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	add(err)
	x.overrun, err = m.Float64Histogram(leasemetrics.RunOverrun, metric.WithUnit("s"),
		metric.WithDescription("How long Run's fn kept running after its lease ended by loss."),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	add(err)
	// An up-down counter rather than an observable gauge: several Managers
	// sharing one MeterProvider then add up instead of overwriting each
	// other's observation.
	x.held, err = m.Int64UpDownCounter(leasemetrics.Held, metric.WithUnit("{lease}"),
		metric.WithDescription("Leases held now (granted and not yet ended)."))
	add(err)
	x.probesLost, err = m.Int64Counter(leasemetrics.ListenerProbesLost, metric.WithUnit("{probe}"),
		metric.WithDescription("Listener probes (a NOTIFY sent from another session, with the pool's settings, to the Manager's own LISTEN connection) that did not come back within CallTimeout."))
	add(err)
	x.fallback, err = m.Int64UpDownCounter(leasemetrics.ListenerFallback, metric.WithUnit("{manager}"),
		metric.WithDescription("Managers whose listener does not receive notifications and that poll every FallbackPoll instead."))
	add(err)
	x.hbStarted, err = m.Int64Counter(leasemetrics.HeartbeatStarted, metric.WithUnit("{heartbeat}"),
		metric.WithDescription("Heartbeat epochs started (heartbeat renewal mode)."))
	add(err)
	x.hbLost, err = m.Int64Counter(leasemetrics.HeartbeatLost, metric.WithUnit("{heartbeat}"),
		metric.WithDescription("Heartbeat epochs that ended other than by Close, by cause; each ended every lease of its Manager."))
	add(err)
	return x, errors.Join(errs...)
}

func (x *metrics) onHeartbeatStarted(ctx context.Context) { x.hbStarted.Add(ctx, 1) }

func (x *metrics) onHeartbeatLost(ctx context.Context, cause string) {
	x.hbLost.Add(ctx, 1, attrs(attribute.String(leasemetrics.AttrCause, cause)))
}

// errorType is the error.type attribute value of a failed call.
func errorType(err error) string {
	// An AcquireWait whose ctx ended while the key was held matches ErrHeld
	// too; it is typed by the context error, as before, so ErrHeld comes
	// last. A refusal (floor, unchecked node) is named even then.
	switch {
	case errors.Is(err, ErrUnauthorized):
		return leasemetrics.ErrorTypeUnauthorized
	case errors.Is(err, ErrBusy):
		return leasemetrics.ErrorTypeBusy
	case errors.Is(err, ErrTokenFloor):
		return leasemetrics.ErrorTypeTokenFloor
	case errors.Is(err, ErrFailoverUnchecked):
		return leasemetrics.ErrorTypeFailoverUnchecked
	case errors.Is(err, ErrClosed):
		return leasemetrics.ErrorTypeClosed
	case errors.Is(err, context.DeadlineExceeded):
		return leasemetrics.ErrorTypeDeadlineExceeded
	case errors.Is(err, context.Canceled):
		return leasemetrics.ErrorTypeCanceled
	case errors.Is(err, ErrHeld):
		return leasemetrics.ErrorTypeHeld
	}
	return leasemetrics.ErrorTypeOther
}

// record records d into h, with error.type when err is not nil; the happy
// path builds no attribute set.
func record(ctx context.Context, h metric.Float64Histogram, d time.Duration, err error) {
	if err == nil {
		h.Record(ctx, d.Seconds())
		return
	}
	h.Record(ctx, d.Seconds(), attrs(attribute.String(leasemetrics.AttrErrorType, errorType(err))))
}

func (x *metrics) onAcquireDone(ctx context.Context, d time.Duration, err error) {
	record(ctx, x.acquireDur, d, err)
}

func (x *metrics) onWaitDone(ctx context.Context, d time.Duration, err error) {
	record(ctx, x.waitDur, d, err)
}

func (x *metrics) onHeld(ctx context.Context, delta int) { x.held.Add(ctx, int64(delta)) }

func (x *metrics) onAcquired(ctx context.Context) { x.acquired.Add(ctx, 1) }

func (x *metrics) onRefused(ctx context.Context, reason string) {
	x.refused.Add(ctx, 1, attrs(attribute.String(leasemetrics.AttrReason, reason)))
}

func (x *metrics) onRenew(ctx context.Context, d time.Duration, err error) {
	outcome := leasemetrics.OutcomeOK
	switch {
	case errors.Is(err, ErrLost):
		outcome = leasemetrics.OutcomeRejected
	case err != nil:
		outcome = leasemetrics.OutcomeError
	}
	a := attrs(attribute.String(leasemetrics.AttrOutcome, outcome))
	x.renewDur.Record(ctx, d.Seconds(), a)
	x.renewFrac.Record(ctx, d.Seconds()/x.ttl.Seconds(), a)
}

func (x *metrics) onLost(ctx context.Context, cause string, delay time.Duration) {
	a, ok := x.lostAttrs[cause]
	if !ok {
		a = attrs(attribute.String(leasemetrics.AttrCause, cause))
	}
	x.lost.Add(ctx, 1, a)
	x.cancelDelay.Record(ctx, max(delay, 0).Seconds(), a)
}

func (x *metrics) onOverrun(ctx context.Context, cause string, d time.Duration) {
	x.overrun.Record(ctx, max(d, 0).Seconds(), attrs(attribute.String(leasemetrics.AttrCause, cause)))
}

func (x *metrics) onReleased(ctx context.Context, res ReleaseResult, err error) {
	switch {
	case err != nil:
		x.released.Add(ctx, 1, x.releasedError...)
	case res >= ReleaseDone && res <= ReleaseNotFound:
		x.released.Add(ctx, 1, x.releasedAttrs[res]...)
	default:
		x.released.Add(ctx, 1, attrs(attribute.String(leasemetrics.AttrResult, res.String())))
	}
}

func (x *metrics) onProbeLost(ctx context.Context) { x.probesLost.Add(ctx, 1) }

func (x *metrics) onListenerFallback(ctx context.Context, delta int) {
	x.fallback.Add(ctx, int64(delta))
}
