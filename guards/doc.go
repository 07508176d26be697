// Package guards holds fencekit's guard adapters, one subpackage per store.
// It has no code of its own.
//
// A guard keeps, for each resource, the highest fencing token it has
// accepted (its mark) and refuses writes presenting a lower one, in the same
// atomic step as the write (package fence states the decision rule and the
// fence.Guard contract):
//
//   - guards/memguard: resources inside one process (and tests).
//   - guards/pgguard: PostgreSQL tables, checked inside the caller's own
//     transaction.
//   - guards/s3guard: S3 / MinIO objects, via conditional PUTs.
//   - guards/httpguard: HTTP services that perform side effects (server
//     middleware over any fence.Guard, and a client RoundTripper).
//   - guards/guardtest: the conformance kit every guard above passes against
//     its real store, and which a guard for any other store can run.
//
// What a guard does not do: it orders writers by token; it does not know
// whether a lease is still held, and it cannot fence effects that bypass it.
// docs/guards.md describes each guard's guarantees and limits.
//
// Guard packages import package fence (and package migrations for migrations and
// identifier validation) only, never package lease, so they accept tokens
// from any source.
package guards
