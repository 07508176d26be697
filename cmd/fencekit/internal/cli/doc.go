// Package cli is the fencekit operator command (cmd/fencekit): one binary
// with one command per job, each a thin layer over one or two library
// calls:
//
//	fencekit migrate up | down | status | validate   sql/migrations: Migrate, Down, Status, Validate
//	fencekit floor status | check | advance          leaseops.TokenFloor: Status, Check; leaseops.CheckFloor
//	fencekit leases list | inspect | revoke | watch  lease.Manager: List, Inspect, Revoke, Watch
//	fencekit janitor sweep                           leaseops.Janitor.Sweep
//	fencekit marks highest | prune                   pgguard.Marks: Highest, DeleteIdle
//
// Main parses the command line, validates every input before it opens a
// connection, runs the command and maps its outcome to the documented exit
// code: ExitOK, ExitFailed (the cause is printed), ExitUsage (bad command
// line or input: nothing changed) or ExitRefused (refused as unsafe: the
// floor check failed and grants stay refused). docs/cli.md is the manual.
//
// Guaranteed: a command that exits with ExitUsage sent no statement. With
// --json every result is one JSON object per line on stdout (and a failure
// ends with one {"error": …, "exit_code": …} object); messages for people
// go to stderr. floor check and floor advance retry, until their deadline,
// while the database does not accept writes yet (a standby being promoted,
// a server starting), so they can run as a Patroni on_role_change callback.
//
// Not guaranteed: the library calls' own guarantees are the only ones; the
// command adds no locking of its own. A failure after a statement was sent
// (a timeout, a lost connection) may leave its effect applied: every
// command that writes is safe to run again.
package cli
