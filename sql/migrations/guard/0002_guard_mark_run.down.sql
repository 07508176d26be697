ALTER TABLE fencekit_guard_marks DROP CONSTRAINT IF EXISTS fencekit_guard_marks_run_len;
ALTER TABLE fencekit_guard_marks DROP COLUMN IF EXISTS run;
