// Package leasemetrics names the OpenTelemetry instruments that package
// lease (a Manager) and package leaseops (the Janitor) record, their
// attribute keys and the values those attributes take: one constant per
// name. The strings are wire names that users match in their backends, not
// Go API: docs/operations.md is their public home, and TestDocumented keeps
// it and these constants in step. It records nothing itself and imports
// nothing.
//
// Every instrument comes from the meter named "github.com/fencekit/fencekit"
// of the MeterProvider in lease.Config or leaseops.JanitorConfig.
// docs/operations.md lists each instrument with its kind, unit, attributes
// and Prometheus name.
//
// # Guaranteed
//
//   - Every instrument name starts with "fencekit.lease."; guards record
//     under "fencekit.guard." (package guards/guardobs), never here.
//   - Every attribute value comes from the fixed sets below: no attribute
//     carries an account id, a session id, a run id or a token, so
//     cardinality stays bounded.
//   - Names and values change only in a release whose CHANGELOG.md says so.
//
// # Not guaranteed
//
// That a measurement reaches an exporter (the SDK's business), or the
// bucket boundaries of the histograms, which may be tuned between releases.
package leasemetrics
