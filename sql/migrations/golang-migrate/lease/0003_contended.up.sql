-- Code generated from lease/0003_contended.{up,down}.sql by go generate ./sql/migrations; DO NOT EDIT.
-- Apply with search_path set to the target schema; objects are unqualified.

-- fencekit lease schema, version 3: release notifies only contended leases.
-- A NOTIFY serialises committing transactions on PostgreSQL's notify queue
-- lock; sending one on every release cost the lease cycle about a third of
-- its throughput (docs/performance.md). A waiter (lease.Manager.AcquireWait)
-- sets contended on the holder's row, under the row lock, before it sleeps;
-- a release sends its NOTIFY only when the flag is set. The row lock orders
-- the two: either the release sees the flag and notifies, or the waiter's
-- update finds the lease already released and the waiter retries at once.
-- The flag is sticky: once a key has had a waiter, every later release of it
-- notifies (a woken waiter that wins leaves other, unwoken waiters behind,
-- whose marks must survive its grant). Keys nobody waited for never notify.
ALTER TABLE fencekit_leases ADD COLUMN IF NOT EXISTS contended boolean NOT NULL DEFAULT false;

CREATE TABLE IF NOT EXISTS fencekit_schema_migrations (
	set_name   text        NOT NULL,
	version    integer     NOT NULL,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (set_name, version));
INSERT INTO fencekit_schema_migrations (set_name, version, name) VALUES ('lease', 3, 'contended')
    ON CONFLICT (set_name, version) DO NOTHING;
