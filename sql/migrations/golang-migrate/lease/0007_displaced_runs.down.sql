-- Code generated from lease/0007_displaced_runs.{up,down}.sql by go generate ./sql/migrations; DO NOT EDIT.
-- Apply with search_path set to the target schema; objects are unqualified.

DELETE FROM fencekit_schema_migrations WHERE set_name = 'lease' AND version = 7;

-- Reverts version 7: drops the table of displaced runs.
DROP TABLE IF EXISTS fencekit_displaced;
