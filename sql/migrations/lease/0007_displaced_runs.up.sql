-- fencekit lease schema, version 7: every run a takeover displaced.
-- Plain SQL (goose / golang-migrate: use the generated ../goose, ../golang-migrate files), run with
-- search_path set to the lease schema.
--
-- fencekit_leases.displaced_run_id (version 5) names only the LAST run a
-- takeover displaced from a key, so a run displaced before another takeover
-- of the same key could no longer learn why it lost the key. The takeover
-- statement (lease.Manager.Takeover) now also inserts one row here, in the
-- same statement, for the run it displaced while that run still held the
-- key. A Manager asks this table, by run_id, which of its held runs were
-- displaced when its listener connects, and why a renewal was refused.
-- by_run_id is the run that took the key over. Rows are deleted by the
-- janitor (lease/leaseops) once displaced_at is older than its retention.
CREATE TABLE IF NOT EXISTS fencekit_displaced (
    run_id       uuid        PRIMARY KEY,
    account_id   text        NOT NULL,
    session_id   text        NOT NULL,
    displaced_at timestamptz NOT NULL,
    by_run_id    uuid        NOT NULL
);

-- The janitor deletes old rows by age.
CREATE INDEX IF NOT EXISTS fencekit_displaced_at_idx ON fencekit_displaced (displaced_at);
