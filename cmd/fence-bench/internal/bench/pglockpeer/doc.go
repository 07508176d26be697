// Command pglockpeer is the cirello.io/pglock side of fence-bench's lease
// cycle comparison. It lives in a module of its own so that the main
// module's dependency list stays free of pglock and lib/pq.
//
// It opens the database with lib/pq (the driver pglock.New accepts),
// creates pglock's table under the given schema-qualified name and then
// serves commands on standard input, one per line, answering on standard
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
