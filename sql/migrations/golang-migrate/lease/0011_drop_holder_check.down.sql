-- Code generated from lease/0011_drop_holder_check.{up,down}.sql by go generate ./sql/migrations; DO NOT EDIT.
-- Apply with search_path set to the target schema; objects are unqualified.

DELETE FROM fencekit_schema_migrations WHERE set_name = 'lease' AND version = 11;

-- Reverts version 11: the holder label is bounded by the database again.
ALTER TABLE fencekit_leases DROP CONSTRAINT IF EXISTS fencekit_leases_holder_len;
ALTER TABLE fencekit_leases ADD CONSTRAINT fencekit_leases_holder_len
    CHECK (holder IS NULL OR octet_length(holder) BETWEEN 1 AND 64);
