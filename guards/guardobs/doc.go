// Package guardobs is the observability kit of fencekit's guards: the
// OpenTelemetry instrument names, units and attribute, the span name,
// attributes and outcome vocabulary, and the log message and fields with
// which a guard reports its decisions. A guard written
// outside fencekit that records through a [Recorder] reports exactly like
// fencekit's own, so one dashboard and one log query cover every guard.
//
// A guard creates one Recorder in its constructor and, at the end of every
// write that got past its argument checks, hands the outcome to
// [Recorder.Decision]:
//
//	rec, err := guardobs.New(guardobs.Config{Kind: "etcd", Name: "etcdguard",
//		MeterProvider: cfg.MeterProvider, TracerProvider: cfg.TracerProvider, Logger: cfg.Logger})
//	...
//	ctx, span := rec.Start(ctx, resource, claim) // a span only with Config.TracerProvider
//	err := g.write(ctx, resource, claim, value)
//	rec.Decision(ctx, err) // accepted, stale (and its token gap) or reused
//	span.End(err)          // outcome: accepted, stale, reused, busy, outcome_unknown, …
//
// # What is recorded
//
//   - [MetricAccepted] counts admitted writes, [MetricStale] stale refusals
//     and [MetricTokenGap] their gap (highest minus presented token),
//     [MetricReused] writes refused because their token was issued twice
//     (fence.ErrTokenReused), and, when [Config.Retries] is set,
//     [RetriesName](kind) the conditional writes retried after losing a
//     race. Every measurement carries one attribute, [AttrGuard], whose
//     value is the guard's kind; no attribute names a resource, a key or a
//     run, so cardinality stays fixed.
//   - With [Config.TracerProvider], each write between [Recorder.Start] and
//     [Span.End] is a span named [SpanWrite], a child of the span in the
//     write's ctx, with the attributes [AttrKind], [AttrResource],
//     [AttrToken], [AttrRunID], [AttrScope] and [AttrOutcome] (the
//     [Outcome] of its error), and [AttrMark] on a refusal. Spans carry
//     identifiers; metrics never do. Only failures ([Outcome]'s second
//     result) set the span status to Error: a stale refusal is a decision.
//   - Each reuse refusal is logged at Error on [Config.Logger], message
//     "<Name>: " + [MsgReused], with the fields [FieldResource],
//     [FieldToken], [FieldRun] and [FieldMarkRun].
//
// # What is guaranteed
//
//   - The names, units, descriptions and bucket boundaries are those of
//     fencekit's built-in guards (docs/operations.md lists them); they change
//     only in a release that says so.
//   - A nil *Recorder records nothing and its methods may be called freely;
//     a nil MeterProvider records nothing; a nil Logger discards; a nil
//     TracerProvider records no span, and Start then allocates nothing.
//   - Decision records nothing for errors that are neither a stale nor a
//     reuse refusal (busy, bad input, outcome unknown, the store's own
//     errors): those are the guard's to report.
//
// # What is not guaranteed
//
// That a measurement reaches an exporter (the SDK's business), or that a
// guard records at all: a guard is conformant without metrics, and
// package guards/guardtest does not check them.
package guardobs
