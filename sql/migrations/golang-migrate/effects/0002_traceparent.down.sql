-- Code generated from effects/0002_traceparent.{up,down}.sql by go generate ./sql/migrations; DO NOT EDIT.
-- Apply with search_path set to the target schema; objects are unqualified.

DELETE FROM fencekit_schema_migrations WHERE set_name = 'effects' AND version = 2;

-- Reverts version 2: the record spans' trace contexts are dropped, and
-- deliveries are no longer linked to their records.
ALTER TABLE fencekit_effects DROP COLUMN IF EXISTS traceparent;
