-- fencekit lease schema, version 9: one heartbeat per Manager.
-- Plain SQL (goose / golang-migrate: use the generated ../goose, ../golang-migrate files), run with
-- search_path set to the lease schema.
--
-- A Manager in heartbeat mode (lease.Config.Renewal, the default) keeps one
-- row here per heartbeat epoch and renews it with ONE statement per period,
-- however many leases it holds. manager_id names an epoch, not a process: a
-- Manager whose heartbeat was refused or expired starts a new epoch (a new
-- id); an epoch's renewal requires expires_at in the future, so an epoch
-- never comes back. holder is an optional label of the Manager.
--
-- Its grants write fencekit_leases rows with manager_id = the epoch and
-- expires_at = 'infinity'. One definition of a live row, used by every
-- statement (docs/lease.md, "One heartbeat per Manager"):
--   released_at IS NULL AND
--   ((expires_at <> 'infinity' AND expires_at > now) OR
--    (expires_at = 'infinity' AND the row's manager has expires_at > now)).
-- Rows with a finite expiry (manager_id NULL, or left set by a grant of an
-- earlier release's statements, which do not know the column) keep the
-- per-lease meaning of versions 1 to 8. An earlier release's acquire refuses
-- an 'infinity' row (its expires_at is in the future), its takeover writes a
-- finite expiry and its release moves expires_at to now, so Managers of both
-- releases never grant one key twice.
--
-- fencekit_leases.displaced_manager_id is the epoch of the run a takeover
-- displaced (set with displaced_run_id), since RETURNING cannot read the
-- overwritten manager_id. fencekit_displaced gains the epoch of the
-- displaced run, so that its Manager's heartbeat statement finds it by
-- manager_id, and a cause: 'taken' (a takeover) or 'revoked'
-- (lease.Manager.Revoke of a heartbeat row, by_run_id NULL); NULL when an
-- earlier release's takeover wrote the row (those are read by
-- displaced_at through the partial index).
CREATE TABLE IF NOT EXISTS fencekit_managers (
    manager_id uuid        PRIMARY KEY,
    holder     text,
    started_at timestamptz NOT NULL,
    renewed_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);

ALTER TABLE fencekit_leases ADD COLUMN IF NOT EXISTS manager_id uuid;
ALTER TABLE fencekit_leases ADD COLUMN IF NOT EXISTS displaced_manager_id uuid;

ALTER TABLE fencekit_displaced ADD COLUMN IF NOT EXISTS manager_id uuid;
ALTER TABLE fencekit_displaced ADD COLUMN IF NOT EXISTS cause text;
ALTER TABLE fencekit_displaced ALTER COLUMN by_run_id DROP NOT NULL;
ALTER TABLE fencekit_displaced DROP CONSTRAINT IF EXISTS fencekit_displaced_cause;
ALTER TABLE fencekit_displaced ADD CONSTRAINT fencekit_displaced_cause
    CHECK (cause IS NULL OR cause IN ('taken', 'revoked'));

-- The heartbeat statement reads its epoch's records since its last beat,
-- and the records an earlier release's takeovers wrote since then.
CREATE INDEX IF NOT EXISTS fencekit_displaced_manager_idx ON fencekit_displaced (manager_id, displaced_at);
CREATE INDEX IF NOT EXISTS fencekit_displaced_legacy_idx ON fencekit_displaced (displaced_at) WHERE cause IS NULL;
