package gcsguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/fencekit/fencekit/fence"
)

// The instruments below carry the same scope, names, units and attribute
// as those of fencekit's other guards, so that one dashboard covers every
// guard; only the retry counter is GCS's own. They are defined here rather
// than shared because this module must not depend on the main module's
// internal packages, which promise no compatibility between versions.
const (
	meterScope     = "github.com/fencekit/fencekit"
	metricAccepted = "fencekit.guard.accepted"
	metricStale    = "fencekit.guard.stale"
	metricTokenGap = "fencekit.guard.token_gap" //nolint:gosec // G101: a metric name, not a credential
	metricReused   = "fencekit.guard.reused"
	metricRetries  = "fencekit.guard.gcs.retries"
	guardKind      = "gcs"
)

// metrics records a Store's decisions. A nil *metrics records nothing.
type metrics struct {
	accepted, stale, reused, retries metric.Int64Counter
	gap                              metric.Int64Histogram
	attrs                            metric.MeasurementOption
}

// newMetrics creates the instruments on mp (nil: the no-op provider).
func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := mp.Meter(meterScope)
	var errs [5]error
	g := &metrics{attrs: metric.WithAttributeSet(attribute.NewSet(attribute.String("guard", guardKind)))}
	g.accepted, errs[0] = m.Int64Counter(metricAccepted, metric.WithUnit("{write}"),
		metric.WithDescription("Writes a guard admitted (token at least the resource's mark)."))
	g.stale, errs[1] = m.Int64Counter(metricStale, metric.WithUnit("{write}"),
		metric.WithDescription("Writes a guard refused because their token was below the resource's mark."))
	g.gap, errs[2] = m.Int64Histogram(metricTokenGap, metric.WithUnit("{token}"),
		metric.WithDescription("Highest minus presented token of each stale rejection."),
		metric.WithExplicitBucketBoundaries(1, 2, 5, 10, 100, 1000, 10000, 100000))
	g.reused, errs[3] = m.Int64Counter(metricReused, metric.WithUnit("{write}"),
		metric.WithDescription("Writes a guard refused because their token equals the mark while their run identity differs (token issued twice)."))
	g.retries, errs[4] = m.Int64Counter(metricRetries, metric.WithUnit("{attempt}"),
		metric.WithDescription("GCS conditional writes retried after losing a race (412)."))
	return g, errors.Join(errs[:]...)
}

// decision records the outcome err of a fenced write: nil is a committed
// write, a *fence.StaleError a stale refusal (with its token gap), a
// *fence.ReusedError a reuse refusal; anything else records nothing.
func (g *metrics) decision(ctx context.Context, err error) {
	if g == nil {
		return
	}
	if err == nil {
		g.accepted.Add(ctx, 1, g.attrs)
		return
	}
	var se *fence.StaleError
	if errors.As(err, &se) {
		g.stale.Add(ctx, 1, g.attrs)
		g.gap.Record(ctx, int64(se.Highest)-int64(se.Presented), g.attrs)
		return
	}
	if _, ok := fence.IsReused(err); ok {
		g.reused.Add(ctx, 1, g.attrs)
	}
}

// retried counts one conditional write retried after losing a race.
func (g *metrics) retried(ctx context.Context) {
	if g != nil {
		g.retries.Add(ctx, 1, g.attrs)
	}
}

// finish ends every fenced write of key that got past the argument checks:
// it records the outcome err in the metrics, logs a token reuse at Error,
// and returns err through contextErr.
func (s *Store) finish(ctx context.Context, key string, err error) error {
	s.met.decision(ctx, err)
	if re, ok := fence.IsReused(err); ok {
		s.log.ErrorContext(ctx, "gcsguard: token reused by a different run; write refused",
			"key", key, "token", int64(re.Token), "run", re.Run, "mark_run", re.MarkRun)
	}
	return contextErr(ctx, err)
}

// contextErr is fence.WrapContext, except that an fence.ErrBusy seen after
// ctx ended is replaced by the context's error: the retries stopped because
// the context ended, and a retry with the same context cannot succeed.
func contextErr(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	cerr := fence.ContextError(ctx)
	if cerr == nil {
		return err
	}
	if errors.Is(err, fence.ErrBusy) {
		return fmt.Errorf("gcsguard: gave up after the context ended (%s): %w", err.Error(), cerr)
	}
	return fence.WrapContext(ctx, err)
}

// discardLogger is the Logger of a Store configured without one.
func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
