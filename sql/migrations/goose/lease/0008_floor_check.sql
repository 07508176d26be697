-- Code generated from lease/0008_floor_check.{up,down}.sql by go generate ./sql/migrations; DO NOT EDIT.
-- Apply with search_path set to the target schema; objects are unqualified.

-- +goose Up
-- +goose StatementBegin
-- fencekit lease schema, version 8: the token floor check as a function the
-- application role may call, so that a Manager configured with a floor
-- source ends the refusal of grants on a new node (migration 0004) by
-- itself, without owning the schema.
-- Plain SQL (goose / golang-migrate: use the generated ../goose, ../golang-migrate files), run with
-- search_path set to the lease schema, on the primary, as the role that is
-- to own the function (normally the schema owner).
--
-- fencekit_check_floor(source_floor, node_change_gap) raises the stored floor
-- to source_floor (never lowers it) and records the node it runs on as
-- checked only when the token sequence's next value is above the resulting
-- floor, moving the sequence forward first when it is not. On the first
-- check after a node change (the node recorded is another one) with
-- node_change_gap > 0, the floor is also raised to the sequence's current
-- value plus node_change_gap, so the sequence jumps past every token the old
-- node may have issued that this node never received (grants lost by
-- asynchronous replication, which no floor source knows until their holders
-- write). It never moves the floor or the sequence backwards.
-- SECURITY DEFINER: it runs with its owner's rights, so the caller needs
-- EXECUTE on it and USAGE on the schema, nothing on the floor table or the
-- sequence. Its search_path is fixed below to the lease schema, pg_catalog
-- and pg_temp last, so that neither the caller's search_path nor a temporary
-- table of the caller can redirect a name.
--
-- Two paths:
--   * nothing to advance (the sequence is above the floor, no gap due): one
--     UPDATE of the floor row, which re-reads the row under its lock and
--     records the node only if the sequence (read before) is above the floor
--     it finds. If a concurrent call raised the floor in between, nothing is
--     recorded and SQLSTATE 40001 asks the caller to retry.
--   * otherwise: LOCK TABLE fencekit_leases IN EXCLUSIVE MODE first (it waits
--     for every statement that may have drawn a token and holds new ones
--     back, as leaseops.TokenFloor.Advance does, in the same order: leases
--     table, then floor row), read the floor row again under its lock (a
--     concurrent check may have recorded the node meanwhile: then no gap is
--     due), raise the floor, setval past it if the sequence is still
--     behind, record the node.
-- On a node whose floor was not checked, an acquire statement whose snapshot
-- precedes the commit reads the old checked_node and is refused; one whose
-- snapshot follows it draws its token after the setval. So no grant at or
-- below the floor can commit on that node.
--
-- Returns the sequence's next value after the call, the stored floor, the
-- node recorded, the node recorded before the call and, when the sequence
-- was moved, its next value before the move (NULL otherwise).
CREATE OR REPLACE FUNCTION fencekit_check_floor(source_floor bigint, node_change_gap bigint,
        OUT next_token bigint, OUT stored_floor bigint, OUT checked_node_now text,
        OUT checked_node_before text, OUT advanced_from bigint)
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER AS $fn$
DECLARE
    seq_last   bigint;
    seq_called boolean;
    stored     bigint;
    target     bigint;
    ok         boolean;
BEGIN
    IF source_floor IS NULL OR source_floor < 0 OR node_change_gap IS NULL OR node_change_gap < 0 THEN
        RAISE EXCEPTION 'fencekit: the token floor source and the node change gap must be non-negative numbers (got %, %)',
                coalesce(source_floor::text, 'NULL'), coalesce(node_change_gap::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    checked_node_now := fencekit_node();
    SELECT t.floor, t.checked_node INTO stored, checked_node_before FROM fencekit_token_floor t WHERE t.id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'fencekit: the token floor row is missing' USING ERRCODE = '55000';
    END IF;
    SELECT s.last_value, s.is_called INTO seq_last, seq_called FROM fencekit_token_seq s;
    next_token := CASE WHEN seq_called THEN seq_last + 1 ELSE seq_last END;

    IF next_token > GREATEST(stored, source_floor)
       AND (node_change_gap = 0 OR checked_node_before IS NOT DISTINCT FROM checked_node_now) THEN
        UPDATE fencekit_token_floor t
           SET floor = GREATEST(t.floor, source_floor),
               updated_at = CASE WHEN source_floor > t.floor THEN clock_timestamp() ELSE t.updated_at END,
               checked_node = CASE WHEN next_token > GREATEST(t.floor, source_floor)
                                    AND (node_change_gap = 0 OR t.checked_node IS NOT DISTINCT FROM checked_node_now)
                                   THEN checked_node_now ELSE t.checked_node END
         WHERE t.id
        RETURNING t.floor, t.checked_node IS NOT DISTINCT FROM checked_node_now AND next_token > t.floor
            INTO stored_floor, ok;
        IF NOT ok THEN
            RAISE EXCEPTION 'fencekit: the token floor or the checked node changed concurrently; check again'
                USING ERRCODE = '40001';
        END IF;
        RETURN;
    END IF;

    LOCK TABLE fencekit_leases IN EXCLUSIVE MODE;
    SELECT t.floor, t.checked_node INTO stored, checked_node_before FROM fencekit_token_floor t WHERE t.id FOR UPDATE;
    SELECT s.last_value, s.is_called INTO seq_last, seq_called FROM fencekit_token_seq s;
    next_token := CASE WHEN seq_called THEN seq_last + 1 ELSE seq_last END;
    target := GREATEST(stored, source_floor);
    IF node_change_gap > 0 AND checked_node_before IS DISTINCT FROM checked_node_now THEN
        target := GREATEST(target, next_token - 1 + node_change_gap);
    END IF;
    UPDATE fencekit_token_floor t
       SET floor = target,
           updated_at = CASE WHEN target > t.floor THEN clock_timestamp() ELSE t.updated_at END,
           checked_node = checked_node_now
     WHERE t.id;
    stored_floor := target;
    IF next_token <= target THEN
        advanced_from := next_token;
        PERFORM setval('fencekit_token_seq', target, true);
        next_token := target + 1;
    END IF;
END
$fn$;

-- The lease schema first, pg_catalog, and pg_temp last (a SECURITY DEFINER
-- function must never resolve a name in the caller's temporary schema).
DO $do$
BEGIN
    EXECUTE format('ALTER FUNCTION fencekit_check_floor(bigint, bigint) SET search_path = %I, pg_catalog, pg_temp',
                   current_schema());
END
$do$;

-- Nobody but the owner until granted: GRANT EXECUTE ON FUNCTION
-- <schema>.fencekit_check_floor(bigint, bigint) TO <application role>
-- (docs/operations.md, "Least-privilege role").
REVOKE ALL ON FUNCTION fencekit_check_floor(bigint, bigint) FROM PUBLIC;

CREATE TABLE IF NOT EXISTS fencekit_schema_migrations (
	set_name   text        NOT NULL,
	version    integer     NOT NULL,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (set_name, version));
INSERT INTO fencekit_schema_migrations (set_name, version, name) VALUES ('lease', 8, 'floor_check')
    ON CONFLICT (set_name, version) DO NOTHING;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DELETE FROM fencekit_schema_migrations WHERE set_name = 'lease' AND version = 8;

-- Reverts version 8: drops the floor check function.
DROP FUNCTION IF EXISTS fencekit_check_floor(bigint, bigint);
-- +goose StatementEnd
