-- Reverts version 9. Heartbeat rows are converted, not refused: a live or
-- dead 'infinity' row gets its manager's expires_at (the row's acquired_at
-- when the manager row is gone), which is the expiry it had under the
-- heartbeat definition, so a key is held after the conversion exactly as
-- long as it was held before, and by the same run. Both tables are locked
-- first so that no grant writes a heartbeat row meanwhile. Revocation
-- records (by_run_id NULL) are dropped: version 8 has no place for them.
LOCK TABLE fencekit_leases, fencekit_managers, fencekit_displaced IN ACCESS EXCLUSIVE MODE;
UPDATE fencekit_leases l
   SET expires_at = coalesce((SELECT m.expires_at FROM fencekit_managers m WHERE m.manager_id = l.manager_id), l.acquired_at)
 WHERE l.expires_at = 'infinity';
DELETE FROM fencekit_displaced WHERE by_run_id IS NULL;
DROP INDEX IF EXISTS fencekit_displaced_legacy_idx;
DROP INDEX IF EXISTS fencekit_displaced_manager_idx;
ALTER TABLE fencekit_displaced DROP CONSTRAINT IF EXISTS fencekit_displaced_cause;
ALTER TABLE fencekit_displaced ALTER COLUMN by_run_id SET NOT NULL;
ALTER TABLE fencekit_displaced DROP COLUMN IF EXISTS cause;
ALTER TABLE fencekit_displaced DROP COLUMN IF EXISTS manager_id;
ALTER TABLE fencekit_leases DROP COLUMN IF EXISTS displaced_manager_id;
ALTER TABLE fencekit_leases DROP COLUMN IF EXISTS manager_id;
DROP TABLE IF EXISTS fencekit_managers;
