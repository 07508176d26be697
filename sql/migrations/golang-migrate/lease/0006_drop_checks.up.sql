-- Code generated from lease/0006_drop_checks.{up,down}.sql by go generate ./sql/migrations; DO NOT EDIT.
-- Apply with search_path set to the target schema; objects are unqualified.

-- fencekit lease schema, version 6: the key, run and token CHECK constraints
-- of version 1 are dropped. Each acquire and release evaluated all of them;
-- together they cost about a tenth of the lease cycle's throughput
-- (docs/performance.md). fencekit's statements never write a value they
-- would refuse: keys and run ids are validated by the Go side before any
-- statement is sent, and every token comes from the sequence and is above
-- the floor (>= 0) by migration 0004's check in the acquire statement.
-- Rows written by other SQL are no longer checked for empty or oversized ids,
-- the zero run id or a non-positive token.
ALTER TABLE fencekit_leases DROP CONSTRAINT IF EXISTS fencekit_leases_token_positive;
ALTER TABLE fencekit_leases DROP CONSTRAINT IF EXISTS fencekit_leases_account_len;
ALTER TABLE fencekit_leases DROP CONSTRAINT IF EXISTS fencekit_leases_session_len;
ALTER TABLE fencekit_leases DROP CONSTRAINT IF EXISTS fencekit_leases_run_nonzero;

CREATE TABLE IF NOT EXISTS fencekit_schema_migrations (
	set_name   text        NOT NULL,
	version    integer     NOT NULL,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (set_name, version));
INSERT INTO fencekit_schema_migrations (set_name, version, name) VALUES ('lease', 6, 'drop_checks')
    ON CONFLICT (set_name, version) DO NOTHING;
