-- Code generated from lease/0005_takeover.{up,down}.sql by go generate ./sql/migrations; DO NOT EDIT.
-- Apply with search_path set to the target schema; objects are unqualified.

DELETE FROM fencekit_schema_migrations WHERE set_name = 'lease' AND version = 5;

-- Reverts version 5: drops the holder label and the displaced run.
ALTER TABLE fencekit_leases DROP CONSTRAINT IF EXISTS fencekit_leases_holder_len;
ALTER TABLE fencekit_leases DROP COLUMN IF EXISTS displaced_run_id;
ALTER TABLE fencekit_leases DROP COLUMN IF EXISTS holder;
