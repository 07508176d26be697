-- fencekit PostgreSQL guard schema, version 2: the run identity of each mark.
-- A write whose token equals the mark while its run identity differs from the
-- run that set the mark is refused (the token was issued twice). '' means no
-- identity (tokens from sources without one follow the token-only rule).
ALTER TABLE fencekit_guard_marks
    ADD COLUMN IF NOT EXISTS run text NOT NULL DEFAULT '';
ALTER TABLE fencekit_guard_marks
    ADD CONSTRAINT fencekit_guard_marks_run_len CHECK (octet_length(run) <= 64);
