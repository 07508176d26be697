ALTER TABLE fencekit_leases DROP COLUMN IF EXISTS contended;
