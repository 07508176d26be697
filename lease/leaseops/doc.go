// Package leaseops holds the operator procedures around package lease:
// what an operator runs, mounts or configures beside the Managers. It
// defines no lease semantics of its own; package lease does.
//
//   - Token floor: one SQL function, the schema's fencekit_check_floor,
//     runs every check. CheckFloor runs it with advance (any role granted
//     EXECUTE on it) against a lease.FloorConfig — the same check, with
//     the same source and Gap, that a Manager configured with
//     lease.Config.Floor runs by itself: it moves the sequence past the
//     floor under a table lock when it is behind and records the node.
//     TokenFloor holds the schema owner's procedures: Check (the function
//     without advance: records the node only when the sequence is already
//     above the floor, never moves it) and Status (reads, changes nothing,
//     works on a standby). Every one returns a FloorReport; floor sources
//     are lease.FloorSource values (lease.StaticFloor, lease.MaxFloor,
//     pgguard.Marks.Highest).
//   - Housekeeping: the Janitor deletes old lease rows in the background
//     (metric fencekit.lease.janitor.deleted).
//   - Handlers: StatusHandler serves a Manager's local leases
//     (lease.Manager.Leases) as JSON for an operator port; HealthHandler
//     answers readiness probes from lease.Manager.Health (200 or 503, no
//     identifiers).
//   - Partitioning: Router spreads keys over one lease.Manager per
//     database, by account, with the Manager's key methods (each on the
//     key's partition) and a List across partitions.
//
// Guaranteed: nothing here changes how a lease is granted or renewed (the
// Router only chooses the Manager), and nothing here holds a lease of its
// own. Everything that runs in the background follows the lease package's
// lifecycle: New starts it, Close stops it. Bad arguments return a
// *fence.ConfigError or an error matching fence.ErrNilArgument and change
// nothing.
//
// Not guaranteed: Router keeps tokens ordered per key only (a key lives in
// one partition); tokens of different partitions are unrelated, so a
// guarded resource must be written under leases of one partition only.
// StatusHandler's document names account and session ids: mount it behind
// authentication. docs/operations.md describes each procedure.
package leaseops
