-- Code generated from lease/0004_node_check.{up,down}.sql by go generate ./sql/migrations; DO NOT EDIT.
-- Apply with search_path set to the target schema; objects are unqualified.

-- +goose Up
-- +goose StatementBegin
-- fencekit lease schema, version 4: grants fail closed on a node whose token
-- floor was never checked, and the floor is enforced by the acquire
-- statement instead of a trigger.
-- Plain SQL (goose / golang-migrate: use the generated ../goose, ../golang-migrate files), run with
-- search_path set to the lease schema, on the primary.
--
-- A node is the database's identity: the cluster's system identifier, the
-- database's oid and the timeline of the current WAL position. Promotion of a
-- replica starts a new timeline; pg_restore into a fresh database (or another
-- cluster) brings back the old row with another oid or system identifier.
-- fencekit_token_floor.checked_node records the node on which the floor was
-- last checked (leaseops' floor check and sequence advance write it, after
-- verifying that the sequence is above the floor). The acquire statement
-- compares it with the node it runs on and refuses the grant (SQLSTATE FK002,
-- lease.ErrFailoverUnchecked) on any other node. This migration records the
-- node it runs on: a schema created or upgraded here counts as checked here.
ALTER TABLE fencekit_token_floor ADD COLUMN IF NOT EXISTS checked_node text;

-- The part of the node that cannot change during a backend's life (system
-- identifier and database oid), cached in the backend's setting
-- fencekit.system so that the acquire statement reads the control file once
-- per connection, not per grant. The timeline is read per statement (it
-- changes under a live connection at promotion). Names are schema-qualified
-- with pg_catalog: the function runs with the caller's rights and needs none.
CREATE OR REPLACE FUNCTION fencekit_system() RETURNS text
    LANGUAGE sql VOLATILE PARALLEL UNSAFE AS $$
SELECT pg_catalog.set_config('fencekit.system',
    (SELECT s.system_identifier::text FROM pg_catalog.pg_control_system() s) || ':' ||
    (SELECT d.oid::text FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database()),
    false)
$$;

-- The node this statement runs on: system:oid/timeline.
CREATE OR REPLACE FUNCTION fencekit_node() RETURNS text
    LANGUAGE sql VOLATILE PARALLEL UNSAFE AS $$
SELECT fencekit_system() || '/' || pg_catalog.left(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 8)
$$;
-- fencekit_system is resolved through the migration's search_path.
ALTER FUNCTION fencekit_node() SET search_path FROM CURRENT;

UPDATE fencekit_token_floor SET checked_node = fencekit_node() WHERE id;

-- Raises the refusal of a grant; the acquire statement calls it only on the
-- refusing branch. FK002: the floor was not checked on this node; FK001: the
-- drawn token is not above the floor. The Go side maps them to
-- lease.ErrFailoverUnchecked and lease.ErrTokenFloor.
CREATE OR REPLACE FUNCTION fencekit_refuse_grant(token bigint, floor bigint, checked text, node text) RETURNS bigint
    LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF checked IS DISTINCT FROM node OR floor IS NULL THEN
        RAISE EXCEPTION 'fencekit: grants refused until the token floor is checked on this node (checked on %, running on %): failover or restore?',
                coalesce(checked, 'none'), node
            USING ERRCODE = 'FK002', DETAIL = format('checked=%s node=%s', coalesce(checked, ''), node),
                  HINT = 'run the token floor check (leaseops.TokenFloor.Check)';
    END IF;
    RAISE EXCEPTION 'fencekit: token % is not above the token floor %', token, floor
        USING ERRCODE = 'FK001', DETAIL = format('token=%s floor=%s', token, floor),
              HINT = 'advance the token sequence (leaseops.TokenFloor.Advance)';
END
$$;

-- Every role that may acquire reads the floor row in the acquire statement.
-- It holds no secret (a floor and a node name).
GRANT SELECT ON fencekit_token_floor TO PUBLIC;

-- The floor trigger of migration 0002 is replaced by the acquire statement's
-- check (it cost a SECURITY DEFINER call on every grant).
DROP TRIGGER IF EXISTS fencekit_leases_token_floor_ins ON fencekit_leases;
DROP TRIGGER IF EXISTS fencekit_leases_token_floor_upd ON fencekit_leases;
DROP FUNCTION IF EXISTS fencekit_check_token_floor();

-- No statement reads this index, and indexing released_at made every acquire
-- and release a non-HOT update.
DROP INDEX IF EXISTS fencekit_leases_released_idx;

CREATE TABLE IF NOT EXISTS fencekit_schema_migrations (
	set_name   text        NOT NULL,
	version    integer     NOT NULL,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (set_name, version));
INSERT INTO fencekit_schema_migrations (set_name, version, name) VALUES ('lease', 4, 'node_check')
    ON CONFLICT (set_name, version) DO NOTHING;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DELETE FROM fencekit_schema_migrations WHERE set_name = 'lease' AND version = 4;

CREATE INDEX IF NOT EXISTS fencekit_leases_released_idx
    ON fencekit_leases (released_at) WHERE released_at IS NOT NULL;
CREATE OR REPLACE FUNCTION fencekit_check_token_floor() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    f bigint;
BEGIN
    SELECT floor INTO f FROM fencekit_token_floor WHERE id;
    IF f IS NOT NULL AND NEW.fence_token <= f THEN
        RAISE EXCEPTION 'fencekit: token % is not above the token floor %', NEW.fence_token, f
            USING ERRCODE = 'FK001', DETAIL = format('token=%s floor=%s', NEW.fence_token, f),
                  HINT = 'advance the token sequence (lease.Manager.AdvanceTokenSequence)';
    END IF;
    RETURN NEW;
END
$$;
DROP TRIGGER IF EXISTS fencekit_leases_token_floor_ins ON fencekit_leases;
CREATE TRIGGER fencekit_leases_token_floor_ins
    BEFORE INSERT ON fencekit_leases
    FOR EACH ROW EXECUTE FUNCTION fencekit_check_token_floor();
DROP TRIGGER IF EXISTS fencekit_leases_token_floor_upd ON fencekit_leases;
CREATE TRIGGER fencekit_leases_token_floor_upd
    BEFORE UPDATE OF fence_token ON fencekit_leases
    FOR EACH ROW WHEN (NEW.fence_token IS DISTINCT FROM OLD.fence_token)
    EXECUTE FUNCTION fencekit_check_token_floor();
REVOKE SELECT ON fencekit_token_floor FROM PUBLIC;
DROP FUNCTION IF EXISTS fencekit_refuse_grant(bigint, bigint, text, text);
DROP FUNCTION IF EXISTS fencekit_node();
DROP FUNCTION IF EXISTS fencekit_system();
ALTER TABLE fencekit_token_floor DROP COLUMN IF EXISTS checked_node;
-- +goose StatementEnd
