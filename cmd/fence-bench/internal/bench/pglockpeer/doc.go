// Command pglockpeer is the cirello.io/pglock side of fence-bench's lease
// cycle comparison and of its pgguard comparison. It lives in a module of
// its own so that the main module's dependency list stays free of pglock
// and lib/pq.
//
// With -guard it measures pgguard's marks mode against a write protected
// by pglock (fence-bench's pg_guard_pglock case): it runs
// bench.PGGuardVsLock in this process with pglock as the lock library
// (default options, lib/pq, FailIfLocked), interleaving the unguarded
// transaction, pgguard's InTx and pglock's lock + the same transaction +
// release operation by operation, and prints the metrics as lines of JSON
// (bench.WriteMetricLines). Its import path lies under
// cmd/fence-bench/internal, so it may import the bench package (its go.mod
// replaces the main module with the repository).
//
// Without -guard, it opens the database with lib/pq (the driver pglock.New
// accepts), creates pglock's table under the given schema-qualified name
// and then serves commands on standard input, one per line, answering on standard
// output:
//
//	run <nanoseconds>   ->  ok <cycles> <elapsed nanoseconds>  |  err <message>
//	quit                ->  (exits)
//
// A run is W workers (-workers), each cycling over its own 64 lock names:
// Client.AcquireContext with pglock.FailIfLocked, then Client.ReleaseContext,
// until the duration has passed; a lock that is not acquired is an error
// (every worker's names are its own). fence-bench alternates these runs
// with its in-process sides, so the peer is idle (blocked on standard
// input) while they are measured.
//
// It guarantees nothing beyond the measurement: it keeps no state between
// runs except pglock's rows, and drops nothing (fence-bench drops the
// schema).
package main
