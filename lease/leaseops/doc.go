// Package leaseops holds the operating procedures around package lease:
// what an operator runs or mounts beside the Managers, not what a program
// needs to hold a lease.
//
//   - StatusHandler serves a Manager's local leases (lease.Manager.Leases)
//     as JSON for an operator port; HealthHandler answers readiness probes
//     from lease.Manager.Health (200 or 503, no identifiers).
//   - Router spreads keys over one lease.Manager per database, by account,
//     with the Manager's key methods (each on the key's partition) and a
//     List across partitions.
//   - The token-floor procedures detect and repair a token sequence left
//     behind by a restore or failover, and record the node they checked,
//     which ends the refusal of grants with lease.ErrFailoverUnchecked
//     there: CheckFloor (any role granted EXECUTE on the schema's
//     fencekit_check_floor; the check a Manager with lease.Config.Floor
//     runs by itself), TokenFloor.Check and TokenFloor.Advance (the schema
//     owner's). The Janitor deletes old rows.
//
// Guaranteed: nothing here changes how a lease is granted or renewed (the
// Router only chooses the Manager), and nothing here holds a lease of its
// own. Everything that runs in the background follows
// the lease package's lifecycle: New starts it, Close stops it.
//
// Not guaranteed: Router keeps tokens ordered per key only (a key lives in
// one partition); tokens of different partitions are unrelated, so a
// guarded resource must be written under leases of one partition only.
// StatusHandler's document names account and session ids: mount it behind
// authentication. docs/operations.md describes each procedure.
package leaseops
