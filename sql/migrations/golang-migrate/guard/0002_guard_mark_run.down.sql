-- Code generated from guard/0002_guard_mark_run.{up,down}.sql by go generate ./sql/migrations; DO NOT EDIT.
-- Apply with search_path set to the target schema; objects are unqualified.

DELETE FROM fencekit_schema_migrations WHERE set_name = 'guard' AND version = 2;

ALTER TABLE fencekit_guard_marks DROP CONSTRAINT IF EXISTS fencekit_guard_marks_run_len;
ALTER TABLE fencekit_guard_marks DROP COLUMN IF EXISTS run;
