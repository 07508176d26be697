-- Code generated from lease/0004_node_check.{up,down}.sql by go generate ./sql/migrations; DO NOT EDIT.
-- Apply with search_path set to the target schema; objects are unqualified.

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
