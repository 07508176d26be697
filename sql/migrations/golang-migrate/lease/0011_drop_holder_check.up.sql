-- Code generated from lease/0011_drop_holder_check.{up,down}.sql by go generate ./sql/migrations; DO NOT EDIT.
-- Apply with search_path set to the target schema; objects are unqualified.

-- fencekit lease schema, version 11: the holder label's CHECK constraint of
-- version 5 is dropped, for the reason version 6 dropped the others.
-- PostgreSQL evaluates every CHECK constraint of a table on each INSERT and
-- UPDATE, and each execution of a statement parses and prepares the
-- constraint's stored expression again; this one cost about 18 µs of
-- server CPU per lease cycle, a fifth of what fencekit's grant and release
-- cost more than the design note's two statements (docs/performance.md).
-- fencekit's statements never write a label they would refuse: the Go side
-- validates it (lease.ValidateHolder) before any statement is sent. Rows
-- written by other SQL are no longer checked for an empty or oversized
-- label.
ALTER TABLE fencekit_leases DROP CONSTRAINT IF EXISTS fencekit_leases_holder_len;

CREATE TABLE IF NOT EXISTS fencekit_schema_migrations (
	set_name   text        NOT NULL,
	version    integer     NOT NULL,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (set_name, version));
INSERT INTO fencekit_schema_migrations (set_name, version, name) VALUES ('lease', 11, 'drop_holder_check')
    ON CONFLICT (set_name, version) DO NOTHING;
