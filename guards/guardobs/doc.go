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
// The names are wire strings and a guard never spells them itself: it hands
// its outcomes to the Recorder. Their one list is docs/operations.md:
// "Metrics" for the instruments (fencekit.guard.accepted, .stale,
// .token_gap, .reused, .<kind>.retries with [Config.Retries] ([RetriesName]),
// .marks.deleted through [Housekeeping]) and "Tracing" for the span
// fencekit.guard.write, its fencekit.guard.* attributes and the outcome
// vocabulary ([Outcome]); docs/guards.md ("Writing your own guard") for the reuse
// record.
//
//   - Every measurement carries one attribute, guard, whose value is the
//     guard's kind ([Config.Kind]); no attribute names a resource, a key or
//     a run, so cardinality stays fixed.
//   - With [Config.TracerProvider], each write between [Recorder.Start] and
//     [Span.End] is a span, a child of the span in the write's ctx, carrying
//     the resource, the claim, the outcome and, on a refusal, the mark.
//     Spans carry identifiers; metrics never do. Only failures ([Outcome]'s
//     second result) set the span status to Error: a stale refusal is a
//     decision.
//   - Each reuse refusal is logged at Error on [Config.Logger], message
//     "<Name>: token reused by a different run; write refused", with the
//     fields resource, token, run and mark_run.
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
