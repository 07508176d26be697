// Package obs holds the OpenTelemetry instruments that fencekit's packages
// share: a nil-safe meter lookup and the guard instruments (accepted writes,
// stale rejections with the token gap, S3 conditional-write retries).
//
// Guaranteed: every instrument is created from the caller's
// metric.MeterProvider (nil means the no-op provider, so nothing is
// recorded and nothing is allocated per call beyond the API's no-op), and no
// attribute ever carries a resource name, account id, session id or run id:
// the only attribute is the guard kind, a small fixed set. Not guaranteed:
// that a measurement reaches an exporter — that is the SDK's business.
package obs

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/fencekit/fencekit/fence"
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

// Guard kinds: the values of the "guard" attribute.
const (
	KindMemory   = "memory"
	KindPostgres = "postgres"
	KindHTTP     = "http"
	KindS3       = "s3"
)

// Instrument names of the guards (documented in docs/operations.md).
const (
	GuardAccepted = "fencekit.guard.accepted"
	GuardStale    = "fencekit.guard.stale"
	GuardTokenGap = "fencekit.guard.token_gap" //nolint:gosec // G101: a metric name, not a credential
	GuardRetries  = "fencekit.guard.s3.retries"
	GuardReused   = "fencekit.guard.reused"
)

// Guard records one guard's decisions. A nil *Guard records nothing, so a
// guard built without a MeterProvider may call its methods freely.
type Guard struct {
	accepted, stale, retries, reused metric.Int64Counter
	gap                              metric.Int64Histogram
	attrs                            metric.MeasurementOption
}

// NewGuard creates the guard instruments for kind (one of the Kind
// constants) on mp (nil: no-op). The error joins instrument-creation
// errors; the instruments are usable (no-op) even then.
func NewGuard(mp metric.MeterProvider, kind string) (*Guard, error) {
	m := Meter(mp)
	var errs [5]error
	g := &Guard{attrs: metric.WithAttributeSet(attribute.NewSet(attribute.String("guard", kind)))}
	g.accepted, errs[0] = m.Int64Counter(GuardAccepted, metric.WithUnit("{write}"),
		metric.WithDescription("Writes a guard admitted (token at least the resource's mark)."))
	g.stale, errs[1] = m.Int64Counter(GuardStale, metric.WithUnit("{write}"),
		metric.WithDescription("Writes a guard refused because their token was below the resource's mark."))
	g.gap, errs[2] = m.Int64Histogram(GuardTokenGap, metric.WithUnit("{token}"),
		metric.WithDescription("Highest minus presented token of each stale rejection."),
		metric.WithExplicitBucketBoundaries(1, 2, 5, 10, 100, 1000, 10000, 100000))
	g.retries, errs[3] = m.Int64Counter(GuardRetries, metric.WithUnit("{attempt}"),
		metric.WithDescription("S3 conditional pointer writes retried after losing a race (412/409)."))
	g.reused, errs[4] = m.Int64Counter(GuardReused, metric.WithUnit("{write}"),
		metric.WithDescription("Writes a guard refused because their token equals the mark while their run identity differs (token issued twice)."))
	return g, errors.Join(errs[:]...)
}

// Accepted counts one admitted write.
func (g *Guard) Accepted(ctx context.Context) {
	if g != nil {
		g.accepted.Add(ctx, 1, g.attrs)
	}
}

// Stale counts one stale rejection and records its token gap.
func (g *Guard) Stale(ctx context.Context, presented, highest fence.Token) {
	if g == nil {
		return
	}
	g.stale.Add(ctx, 1, g.attrs)
	g.gap.Record(ctx, int64(highest)-int64(presented), g.attrs)
}

// Reused counts one write refused as a token reuse.
func (g *Guard) Reused(ctx context.Context) {
	if g != nil {
		g.reused.Add(ctx, 1, g.attrs)
	}
}

// Retried counts n retried conditional writes.
func (g *Guard) Retried(ctx context.Context, n int) {
	if g != nil && n > 0 {
		g.retries.Add(ctx, int64(n), g.attrs)
	}
}

// Decision records the outcome err of a guarded write: nil is an accepted
// write, a *fence.StaleError a stale rejection, a *fence.ReusedError a
// reuse refusal; anything else (busy, bad input, the write's own error)
// records nothing.
func (g *Guard) Decision(ctx context.Context, err error) {
	if g == nil {
		return
	}
	if err == nil {
		g.Accepted(ctx)
		return
	}
	var se *fence.StaleError
	if errors.As(err, &se) {
		g.Stale(ctx, se.Presented, se.Highest)
		return
	}
	if _, ok := fence.IsReused(err); ok {
		g.Reused(ctx)
	}
}
