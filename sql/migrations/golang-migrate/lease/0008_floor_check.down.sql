-- Code generated from lease/0008_floor_check.{up,down}.sql by go generate ./sql/migrations; DO NOT EDIT.
-- Apply with search_path set to the target schema; objects are unqualified.

DELETE FROM fencekit_schema_migrations WHERE set_name = 'lease' AND version = 8;

-- Reverts version 8: drops the floor check function.
DROP FUNCTION IF EXISTS fencekit_check_floor(bigint, bigint);
