DROP TRIGGER IF EXISTS fencekit_leases_token_floor_upd ON fencekit_leases;
DROP TRIGGER IF EXISTS fencekit_leases_token_floor_ins ON fencekit_leases;
DROP FUNCTION IF EXISTS fencekit_check_token_floor();
DROP TABLE IF EXISTS fencekit_token_floor;
