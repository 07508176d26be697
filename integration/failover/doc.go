// Package failover tests fencekit on real PostgreSQL replicas, crashes and
// restores, on private clusters made by internal/pgcluster (never the
// shared server's configuration): an asynchronous replica promoted after the
// primary was killed with the replication link stalled (processes reconnect
// at once, and again with the documented floor procedure run first), a
// synchronous standby, a crash and restart of the primary, and a
// pg_dump/pg_restore of an older state into a fresh database. The guards'
// marks live in a database that survives (the shared test server), as they
// would on a separate cluster in production.
//
// Each case asserts: no write under a re-used token is accepted, grants are
// refused with lease.ErrFailoverUnchecked on a node whose floor was not
// checked, and grants after the check carry tokens above every token a guard
// accepted. The figures of each case are logged (go test -v) and recorded in
// docs/operations.md.
package failover
