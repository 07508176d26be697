package guardobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/fence"
)

// scopeName is the instrumentation scope of every guard's meter.
const scopeName = "github.com/fencekit/fencekit"

// Instrument names shared by every guard.
const (
	metricAccepted = "fencekit.guard.accepted"
	metricStale    = "fencekit.guard.stale"
	metricTokenGap = "fencekit.guard.token_gap" //nolint:gosec // G101: a metric name, not a credential
	metricReused   = "fencekit.guard.reused"
	// metricMarksDeleted counts guard marks removed by housekeeping
	// (pgguard.Marks), with the guard attribute.
	metricMarksDeleted = "fencekit.guard.marks.deleted"
)

// attrGuard is the one attribute of every measurement: the guard's kind.
const attrGuard = "guard"

// msgReused is the message (after "<Config.Name>: ") of the Error record
// logged for each write refused as a token reuse.
const msgReused = "token reused by a different run; write refused"

// Log fields of the reuse record.
const (
	fieldResource = "resource" // the resource (key, object, row) as the guard was given it
	fieldToken    = "token"    // the token of the write and of the mark (int64)
	fieldRun      = "run"      // the refused write's run identity
	fieldMarkRun  = "mark_run" // the run identity stored with the mark
)

// tokenGapBounds returns the explicit bucket boundaries of metricTokenGap,
// a fresh slice on each call (the boundaries cannot be changed).
func tokenGapBounds() []float64 {
	return []float64{1, 2, 5, 10, 100, 1000, 10000, 100000}
}

// RetriesName is the name of kind's retry counter:
// "fencekit.guard.<kind>.retries" (fencekit.guard.s3.retries for S3).
func RetriesName(kind string) string { return "fencekit.guard." + kind + ".retries" }

// Config configures a Recorder. Kind is required.
type Config struct {
	// Kind is the value of the guard attribute: 1 to 32 bytes of lower-case
	// ASCII letters, digits and '_' (fencekit's guards use "memory",
	// "postgres", "http", "s3", "gcs", "redis", "mysql", "nats" and "file").
	Kind string
	// Name prefixes log messages, usually the guard's package name
	// ("redisguard"). Default: Kind + "guard".
	Name string
	// Retries, when set, creates the counter RetriesName(Kind) with this
	// description, for guards whose conditional writes can lose a race and
	// be retried. Empty: no retry counter.
	Retries string
	// MeterProvider receives the instruments. Nil records nothing.
	MeterProvider metric.MeterProvider
	// Logger receives the reuse records. Nil discards.
	Logger *slog.Logger
	// TracerProvider records the span of each write the guard hands to
	// Recorder.Start (span "fencekit.guard.write"). Nil records none and costs nothing, like
	// a nil MeterProvider.
	TracerProvider trace.TracerProvider
}

var kindRE = regexp.MustCompile(`^[a-z0-9_]{1,32}$`)

// Recorder records one guard's decisions. Its methods are safe for
// concurrent use; on a nil *Recorder they do nothing.
type Recorder struct {
	accepted, stale, reused, retries metric.Int64Counter
	gap                              metric.Int64Histogram
	attrs                            metric.MeasurementOption
	log                              *slog.Logger
	name                             string
	kind                             string
	tracer                           trace.Tracer // nil: tracing off (trace.go)
}

// New validates cfg and creates the instruments on cfg.MeterProvider. An
// error creating an instrument is returned (matching fence.ErrInvalidConfig)
// with no Recorder.
func New(cfg Config) (*Recorder, error) {
	if !kindRE.MatchString(cfg.Kind) {
		return nil, configErr("Kind", fmt.Sprintf("%q: want 1 to 32 bytes of a-z, 0-9 and '_'", cfg.Kind), nil)
	}
	if cfg.Name == "" {
		cfg.Name = cfg.Kind + "guard"
	}
	mp := cfg.MeterProvider
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	m := mp.Meter(scopeName)
	r := &Recorder{
		attrs: metric.WithAttributeSet(attribute.NewSet(attribute.String(attrGuard, cfg.Kind))),
		log:   cfg.Logger,
		name:  cfg.Name,
		kind:  cfg.Kind,
	}
	if cfg.TracerProvider != nil {
		r.tracer = cfg.TracerProvider.Tracer(scopeName)
	}
	var errs [5]error
	r.accepted, errs[0] = m.Int64Counter(metricAccepted, metric.WithUnit("{write}"),
		metric.WithDescription("Writes a guard admitted (token at least the resource's mark)."))
	r.stale, errs[1] = m.Int64Counter(metricStale, metric.WithUnit("{write}"),
		metric.WithDescription("Writes a guard refused because their token was below the resource's mark."))
	r.gap, errs[2] = m.Int64Histogram(metricTokenGap, metric.WithUnit("{token}"),
		metric.WithDescription("Highest minus presented token of each stale rejection."),
		metric.WithExplicitBucketBoundaries(tokenGapBounds()...))
	r.reused, errs[3] = m.Int64Counter(metricReused, metric.WithUnit("{write}"),
		metric.WithDescription("Writes a guard refused because their token equals the mark while their run identity differs (token issued twice)."))
	if cfg.Retries != "" {
		r.retries, errs[4] = m.Int64Counter(RetriesName(cfg.Kind), metric.WithUnit("{attempt}"),
			metric.WithDescription(cfg.Retries))
	}
	if err := errors.Join(errs[:]...); err != nil {
		return nil, configErr("MeterProvider", "instruments", err)
	}
	return r, nil
}

// Accepted counts one admitted write.
func (r *Recorder) Accepted(ctx context.Context) {
	if r != nil {
		r.accepted.Add(ctx, 1, r.attrs)
	}
}

// Stale counts one stale refusal and records its token gap.
func (r *Recorder) Stale(ctx context.Context, presented, highest fence.Token) {
	if r == nil {
		return
	}
	r.stale.Add(ctx, 1, r.attrs)
	r.gap.Record(ctx, int64(highest)-int64(presented), r.attrs)
}

// Reused counts one reuse refusal and logs it at Error with its fields.
func (r *Recorder) Reused(ctx context.Context, e *fence.ReusedError) {
	if r == nil || e == nil {
		return
	}
	r.reused.Add(ctx, 1, r.attrs)
	r.log.ErrorContext(ctx, r.name+": "+msgReused,
		fieldResource, e.Resource, fieldToken, int64(e.Token), fieldRun, e.Run, fieldMarkRun, e.MarkRun)
}

// Retried counts n conditional writes retried after losing a race. It does
// nothing when the Recorder was made without Config.Retries.
func (r *Recorder) Retried(ctx context.Context, n int) {
	if r != nil && r.retries != nil && n > 0 {
		r.retries.Add(ctx, int64(n), r.attrs)
	}
}

// Decision records the outcome err of one guarded write: nil is an
// admitted write, a *fence.StaleError a stale refusal, a *fence.ReusedError
// a reuse refusal (also logged); anything else records nothing.
func (r *Recorder) Decision(ctx context.Context, err error) {
	if r == nil {
		return
	}
	if err == nil {
		r.Accepted(ctx)
		return
	}
	if se, ok := fence.IsStale(err); ok {
		r.Stale(ctx, se.Presented, se.Highest)
		return
	}
	if re, ok := fence.IsReused(err); ok {
		r.Reused(ctx, re)
	}
}

// configErr is the *fence.ConfigError of a guardobs Config field.
func configErr(field, reason string, err error) error {
	return &fence.ConfigError{Source: "guardobs", Field: field, Reason: reason, Err: err}
}
