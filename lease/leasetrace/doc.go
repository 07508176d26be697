// Package leasetrace names the OpenTelemetry spans that package lease (a
// Manager configured with lease.Config.TracerProvider) records and their
// attribute keys: one constant per name, for trace queries, dashboards and
// code that records spans beside the lease's (mcpfence). The values of
// AttrOutcome are strings listed in docs/operations.md, not constants. It
// records nothing itself and imports nothing.
//
// Every span comes from the tracer named "github.com/fencekit/fencekit" of
// the TracerProvider in lease.Config. docs/operations.md ("Tracing") lists
// each span with its attributes and shows a recorded trace.
//
// # Guaranteed
//
//   - Every span name and attribute key starts with "fencekit.lease.";
//     guards record under "fencekit.guard." (package guards/guardobs).
//   - A span's status is Error only for failures; a refusal the protocol
//     defines (held, unauthorized, token floor, unchecked node, busy) is an
//     outcome with status Unset.
//   - Names and values change only in a release whose CHANGELOG.md says so.
//
// # Not guaranteed
//
// That a span reaches an exporter (the SDK's business and its sampler's).
// Unlike metric attributes (docs/operations.md), span attributes
// carry identifiers: account and session ids, run ids and tokens.
package leasetrace
