// Package guards holds fencekit's guard adapters, one subpackage per store.
// It has no code of its own.
//
// A guard keeps, for each resource, the highest fencing token it has
// accepted (its mark, with the run identity that set it) and refuses, in the
// same atomic step as the write, writes presenting a lower token (stale) or
// the same token from a different run (reused). Package fence states the
// decision rule, the claim a write presents and the fence.Guard contract.
// Every guard has a ctx-first form that takes the claim from the context
// (refusing a context without one with fence.ErrNoToken) beside its
// explicit-token form, and once the context has ended it reports an error
// matching the context's error and cause, never fence.ErrBusy.
//
//   - guards/memguard: resources inside one process (and tests).
//   - guards/pgguard: PostgreSQL tables, checked inside the caller's own
//     transaction.
//   - guards/s3guard: S3 / MinIO objects, via conditional PUTs.
//   - guards/gcsguard: Google Cloud Storage objects, via generation
//     preconditions.
//   - guards/redisguard: Redis keys, via one Lua script (nested module).
//   - guards/mysqlguard: MySQL and MariaDB tables, in the caller's own
//     transaction or on the user's row (nested module).
//   - guards/natsguard: NATS JetStream key-value buckets, via writes
//     conditional on the key's revision (nested module).
//   - guards/fileguard: files on a local file system, under a per-file lock
//     with an atomic rename.
//   - guards/httpguard: HTTP services that perform side effects (server
//     middleware over any fence.Guard, and a client RoundTripper).
//   - guards/guardtest: the conformance kit every guard above passes against
//     its real store, and which a guard for any other store can run.
//   - guards/guardobs: the instrument names and log record every guard
//     reports with, for guards written outside fencekit too.
//
// The Config field holding a guard's store is named by what it holds:
// DB for a SQL database (pgguard, mysqlguard; pgguard's SQLDB is the same
// database through database/sql), Client for any other store's client
// (s3guard, gcsguard, redisguard, natsguard), and, where the store is not
// reached through a handle, the location itself (fileguard's Dir). Object
// and key-value guards name their container Bucket. s3guard and gcsguard
// have the same methods (Put, PutBytes, Delete, Do, Fence, Get, GetBytes,
// Stat, Mark, Sweep, and the functions Stage, StageBytes, StageDelete).
// Every guard that stores values (redisguard, natsguard, fileguard,
// s3guard, gcsguard) takes a Fence callback's new value through
// fence.Stage and fence.StageDelete, so code written against fence.Guard
// stages without knowing the guard.
//
// What a guard does not do: it orders writers by token; it does not know
// whether a lease is still held, and it cannot fence effects that bypass it.
// docs/guards.md describes each guard's guarantees and limits.
//
// Guard packages import package fence (and package migrations for migrations and
// identifier validation, and guards/guardobs for metrics and logs) only,
// never package lease, so they accept tokens from any source.
package guards
