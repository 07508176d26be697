// Package effectsobs names the OpenTelemetry instruments and spans that
// package effects records (an Outbox and its Relays), their attribute keys
// and the values those attributes take: one constant per name, for
// dashboards, alerts and tests. It records nothing itself and imports
// nothing.
//
// Every instrument comes from the meter named "github.com/fencekit/fencekit"
// of effects.Config.MeterProvider, every span from the tracer of the same
// name of effects.Config.TracerProvider. docs/operations.md lists each
// instrument with its kind, unit and attributes, and each span with its
// attributes.
//
// A SpanDeliver is a root span linked (a span link, not a parent) to the
// SpanRecord of its effect when the record was traced: package effects
// stores the record span's W3C traceparent with the effect.
//
// # Guaranteed
//
//   - Every instrument and span name starts with "fencekit.effects.".
//   - Metric attributes are only AttrTarget (a configured target name: the
//     set is fixed by the Outbox's Config), AttrSchema (the configured
//     schema) and AttrReason (the Reason* values): no metric carries an
//     effect id, a request key, a lease key, a run id or a token, so
//     cardinality stays bounded. Spans carry identifiers.
//   - Every SpanDeliver of an effect whose SpanRecord was recorded (an
//     Outbox with a TracerProvider, a valid span context) carries exactly
//     one link, to that SpanRecord's trace and span ids.
//   - Names and values change only in a release whose CHANGELOG.md says so.
//
// # Not guaranteed
//
// That a measurement reaches an exporter (the SDK's business), or the
// bucket boundaries of the histograms, which may be tuned between releases.
package effectsobs
