-- Reverts version 12: parked grants become live per-lease rows with their
-- finite expiry (they end when it passes, as a per-lease row whose holder
-- stopped renewing).
ALTER TABLE fencekit_leases DROP COLUMN IF EXISTS parked_run_id;
