-- Code generated from lease/0003_contended.{up,down}.sql by go generate ./sql/migrations; DO NOT EDIT.
-- Apply with search_path set to the target schema; objects are unqualified.

DELETE FROM fencekit_schema_migrations WHERE set_name = 'lease' AND version = 3;

ALTER TABLE fencekit_leases DROP COLUMN IF EXISTS contended;
