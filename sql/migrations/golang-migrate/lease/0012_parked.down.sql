-- Code generated from lease/0012_parked.{up,down}.sql by go generate ./sql/migrations; DO NOT EDIT.
-- Apply with search_path set to the target schema; objects are unqualified.

DELETE FROM fencekit_schema_migrations WHERE set_name = 'lease' AND version = 12;

-- Reverts version 12: parked grants become live per-lease rows with their
-- finite expiry (they end when it passes, as a per-lease row whose holder
-- stopped renewing).
ALTER TABLE fencekit_leases DROP COLUMN IF EXISTS parked_run_id;
