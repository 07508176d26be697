DROP TABLE IF EXISTS fencekit_leases;
DROP SEQUENCE IF EXISTS fencekit_token_seq;
