-- Reverts version 5: drops the holder label and the displaced run.
ALTER TABLE fencekit_leases DROP CONSTRAINT IF EXISTS fencekit_leases_holder_len;
ALTER TABLE fencekit_leases DROP COLUMN IF EXISTS displaced_run_id;
ALTER TABLE fencekit_leases DROP COLUMN IF EXISTS holder;
