// Package leasesql holds SQL shared by the packages that read the lease
// table: the one definition of a live lease row, used by package lease
// (every statement that asks whether a grant is still held, and
// lease.CheckClaimTx) and by package effects (a record's check of its
// claim, in the same statement as the insert), so the two cannot drift
// apart.
package leasesql

// Live is the one definition of a live lease row (docs/lease.md, "One
// heartbeat per Manager"), for the row alias row at the database time now,
// with schema the placeholder its statements replace by the quoted lease
// schema ("$S" in lease, "$L" in effects): not released and either a
// finite expiry after now (a per-lease row) or expires_at = 'infinity'
// and the row's manager (heartbeat epoch) unexpired at now (a heartbeat
// row, migration 0009). The CASE reads fencekit_managers for heartbeat rows
// only.
func Live(row, now, schema string) string {
	return `(` + row + `.released_at IS NULL AND CASE WHEN ` + row + `.expires_at = 'infinity'
    THEN EXISTS (SELECT 1 FROM ` + schema + `.fencekit_managers hb WHERE hb.manager_id = ` + row + `.manager_id AND hb.expires_at > ` + now + `)
    ELSE ` + row + `.expires_at > ` + now + ` END)`
}
