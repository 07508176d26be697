-- Code generated from lease/0012_parked.{up,down}.sql by go generate ./sql/migrations; DO NOT EDIT.
-- Apply with search_path set to the target schema; objects are unqualified.

-- fencekit lease schema, version 12: parked grants.
-- A grant can be parked (lease.Lease.Park) between the calls of a run: its
-- row keeps run_id and fence_token, is not released, carries a finite
-- expires_at (the database's now + the idle bound) and no manager_id, so
-- that no heartbeat epoch keeps it and no process renews it. Any Manager
-- may take it back (lease.Manager.Resume), without drawing a token.
--
-- A row is parked iff parked_run_id = run_id. Every grant (acquire,
-- takeover) writes a new run_id, so a parked mark left on a row no longer
-- matches once the key is granted again: the grant statements need not
-- clear it. Renewals of this release exclude parked rows, so that a
-- renewal sent before the park cannot move its expiry.
--
-- To a Manager of an earlier release a parked row is a live row with a
-- finite expiry (per-lease meaning of versions 1 to 8): its acquire refuses
-- the key until the expiry passes, its takeover displaces the run, its
-- release (same run_id) releases it. It never renews the row, since no run
-- it holds is parked.
ALTER TABLE fencekit_leases ADD COLUMN IF NOT EXISTS parked_run_id uuid;

CREATE TABLE IF NOT EXISTS fencekit_schema_migrations (
	set_name   text        NOT NULL,
	version    integer     NOT NULL,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (set_name, version));
INSERT INTO fencekit_schema_migrations (set_name, version, name) VALUES ('lease', 12, 'parked')
    ON CONFLICT (set_name, version) DO NOTHING;
