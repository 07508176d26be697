-- Reverts version 11: the holder label is bounded by the database again.
ALTER TABLE fencekit_leases DROP CONSTRAINT IF EXISTS fencekit_leases_holder_len;
ALTER TABLE fencekit_leases ADD CONSTRAINT fencekit_leases_holder_len
    CHECK (holder IS NULL OR octet_length(holder) BETWEEN 1 AND 64);
