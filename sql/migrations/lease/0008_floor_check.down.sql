-- Reverts version 8: drops the floor check function.
DROP FUNCTION IF EXISTS fencekit_check_floor(bigint, bigint);
