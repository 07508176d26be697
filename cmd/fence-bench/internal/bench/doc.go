// Package bench is fencekit's measurement harness, run by cmd/fence-bench
// (make bench): one function per case (lease cycle against the design
// note's statements and cirello.io/pglock, renewal at scale, guard
// overhead against the plain writes and against the lock libraries users
// would otherwise pick (redislock, redsync, pglock), growth of the lease
// cycle with workers and of renewal with held leases, handover,
// contention), the side-by-side round runner
// (Alternate, Parallel), statistics (Summarize, Percentile, BusyTime), the
// report (a table for people and one JSON line for machines) and the SVG
// chart.
//
// Guaranteed: every comparison alternates its sides within one run (rounds
// rotated so each side runs in every position), figures that come from
// rounds carry their min/median/max, the JSON line keeps its keys (a failed
// case reports its keys as null), and output is deterministic for given
// figures (sorted JSON keys, fixed chart layout). Each case creates and
// drops its own schema or bucket.
//
// Not guaranteed: absolute figures; they depend on the machine and its load
// (the load average is recorded with the run). The targets are the Target
// fields the cases fill in; the method and the figures of real runs are in
// docs/performance.md. The pglock side needs the go command to build the
// peer module (the pglockpeer directory); without it that side is reported
// as not measured, as are the pg_guard_pglock case (run in that module) and
// the Redis, MySQL and NATS guard cases (run in the storesbench module).
package bench
