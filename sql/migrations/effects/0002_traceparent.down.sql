-- Reverts version 2: the record spans' trace contexts are dropped, and
-- deliveries are no longer linked to their records.
ALTER TABLE fencekit_effects DROP COLUMN IF EXISTS traceparent;
