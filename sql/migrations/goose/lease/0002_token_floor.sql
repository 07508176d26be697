-- Code generated from lease/0002_token_floor.{up,down}.sql by go generate ./sql/migrations; DO NOT EDIT.
-- Apply with search_path set to the target schema; objects are unqualified.

-- +goose Up
-- +goose StatementBegin
-- fencekit lease schema, version 2: the token floor.
-- Plain SQL (goose / golang-migrate: use the generated ../goose, ../golang-migrate files), run with
-- search_path set to the lease schema (the functions below capture it).

-- One row: every fencing token written to fencekit_leases must be greater
-- than floor. It is raised (never lowered) after a restore or failover by the
-- token floor check (package leaseops: TokenFloor.Advance, and CheckFloor
-- through fencekit_check_floor of migration 0008), from the highest token
-- the guards have accepted and an operator-supplied value.
CREATE TABLE IF NOT EXISTS fencekit_token_floor (
    id         boolean     PRIMARY KEY DEFAULT true,
    floor      bigint      NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT fencekit_token_floor_one_row CHECK (id),
    CONSTRAINT fencekit_token_floor_nonnegative CHECK (floor >= 0)
);
INSERT INTO fencekit_token_floor (id, floor) VALUES (true, 0) ON CONFLICT (id) DO NOTHING;

-- Refuses a row whose new token is not above the floor, so that a sequence
-- left behind by a restore can neither hand out a token the guards would
-- refuse nor re-issue one they already accepted. SECURITY DEFINER with the
-- migration's search_path: the application role needs no privilege on the
-- floor table, and a caller's search_path cannot redirect the lookup.
-- SQLSTATE FK001 is fencekit's; the Go side maps it to lease.ErrTokenFloor.
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

CREATE TABLE IF NOT EXISTS fencekit_schema_migrations (
	set_name   text        NOT NULL,
	version    integer     NOT NULL,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (set_name, version));
INSERT INTO fencekit_schema_migrations (set_name, version, name) VALUES ('lease', 2, 'token_floor')
    ON CONFLICT (set_name, version) DO NOTHING;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DELETE FROM fencekit_schema_migrations WHERE set_name = 'lease' AND version = 2;

DROP TRIGGER IF EXISTS fencekit_leases_token_floor_upd ON fencekit_leases;
DROP TRIGGER IF EXISTS fencekit_leases_token_floor_ins ON fencekit_leases;
DROP FUNCTION IF EXISTS fencekit_check_token_floor();
DROP TABLE IF EXISTS fencekit_token_floor;
-- +goose StatementEnd
