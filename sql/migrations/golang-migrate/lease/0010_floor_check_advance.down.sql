-- Code generated from lease/0010_floor_check_advance.{up,down}.sql by go generate ./sql/migrations; DO NOT EDIT.
-- Apply with search_path set to the target schema; objects are unqualified.

DELETE FROM fencekit_schema_migrations WHERE set_name = 'lease' AND version = 10;

-- Reverts version 10: version 8's fencekit_check_floor(bigint, bigint) gets
-- its own body back (CREATE OR REPLACE keeps its owner and grants), and the
-- function with the advance option is dropped.
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

DO $do$
BEGIN
    EXECUTE format('ALTER FUNCTION fencekit_check_floor(bigint, bigint) SET search_path = %I, pg_catalog, pg_temp',
                   current_schema());
END
$do$;

DROP FUNCTION IF EXISTS fencekit_check_floor(bigint, bigint, boolean);
