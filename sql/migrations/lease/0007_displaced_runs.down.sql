-- Reverts version 7: drops the table of displaced runs.
DROP TABLE IF EXISTS fencekit_displaced;
