-- Code generated from lease/0002_token_floor.{up,down}.sql by go generate ./sql/migrations; DO NOT EDIT.
-- Apply with search_path set to the target schema; objects are unqualified.

DELETE FROM fencekit_schema_migrations WHERE set_name = 'lease' AND version = 2;

DROP TRIGGER IF EXISTS fencekit_leases_token_floor_upd ON fencekit_leases;
DROP TRIGGER IF EXISTS fencekit_leases_token_floor_ins ON fencekit_leases;
DROP FUNCTION IF EXISTS fencekit_check_token_floor();
DROP TABLE IF EXISTS fencekit_token_floor;
