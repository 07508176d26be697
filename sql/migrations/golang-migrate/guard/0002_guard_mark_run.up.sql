-- Code generated from guard/0002_guard_mark_run.{up,down}.sql by go generate ./sql/migrations; DO NOT EDIT.
-- Apply with search_path set to the target schema; objects are unqualified.

-- fencekit PostgreSQL guard schema, version 2: the run identity of each mark.
-- A write whose token equals the mark while its run identity differs from the
-- run that set the mark is refused (the token was issued twice). '' means no
-- identity (tokens from sources without one follow the token-only rule).
ALTER TABLE fencekit_guard_marks
    ADD COLUMN IF NOT EXISTS run text NOT NULL DEFAULT '';
ALTER TABLE fencekit_guard_marks
    ADD CONSTRAINT fencekit_guard_marks_run_len CHECK (octet_length(run) <= 64);

CREATE TABLE IF NOT EXISTS fencekit_schema_migrations (
	set_name   text        NOT NULL,
	version    integer     NOT NULL,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (set_name, version));
INSERT INTO fencekit_schema_migrations (set_name, version, name) VALUES ('guard', 2, 'guard_mark_run')
    ON CONFLICT (set_name, version) DO NOTHING;
