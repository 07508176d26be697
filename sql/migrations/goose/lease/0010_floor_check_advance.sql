-- Code generated from lease/0010_floor_check_advance.{up,down}.sql by go generate ./sql/migrations; DO NOT EDIT.
-- Apply with search_path set to the target schema; objects are unqualified.

-- +goose Up
-- +goose StatementBegin
-- fencekit lease schema, version 10: the token floor check with an advance
-- option, so that checking without moving the sequence (leaseops
-- TokenFloor.Check, "fencekit floor check") and the recovery that moves it
-- (the automatic check of lease.Config.Floor, leaseops.CheckFloor,
-- "fencekit floor advance") run one function.
-- Plain SQL (goose / golang-migrate: use the generated ../goose, ../golang-migrate files), run with
-- search_path set to the lease schema, on the primary, as the role that is
-- to own the functions (normally the schema owner).
--
-- fencekit_check_floor(source_floor, node_change_gap, advance) is version
-- 8's fencekit_check_floor(source_floor, node_change_gap) with advance:
--   * true: exactly version 8's check. It raises the stored floor to
--     source_floor (never lowers it) and records the node it runs on as
--     checked, moving the token sequence past the floor first when it is not
--     above it (and by node_change_gap on the first check after a node
--     change), under LOCK TABLE fencekit_leases IN EXCLUSIVE MODE.
--   * false: it raises the stored floor to source_floor and records the node
--     as checked only when the sequence's next value is above the resulting
--     floor, in one UPDATE of the floor row; it never moves the sequence and
--     takes no lock on fencekit_leases. A node_change_gap above 0 is refused
--     (SQLSTATE 22023): the gap moves the sequence.
-- checked is true when the node it ran on is recorded as checked and the
-- sequence's next value is above the stored floor: grants on the node are
-- allowed. With advance false it is false when the sequence is behind;
-- with advance true the function either returns checked true or raises.
-- The other outputs are version 8's, node being the node it ran on.
--
-- fencekit_check_floor(source_floor, node_change_gap) stays, for roles
-- granted EXECUTE on it (docs/operations.md, "Least-privilege role") and
-- for processes of the previous release: it calls the new function with
-- advance true. Both are SECURITY DEFINER with the search_path of version 8
-- (the lease schema, pg_catalog, pg_temp last).
CREATE OR REPLACE FUNCTION fencekit_check_floor(source_floor bigint, node_change_gap bigint, advance boolean,
        OUT next_token bigint, OUT stored_floor bigint, OUT node text,
        OUT checked_node_before text, OUT advanced_from bigint, OUT checked boolean)
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER AS $fn$
DECLARE
    seq_last   bigint;
    seq_called boolean;
    stored     bigint;
    target     bigint;
BEGIN
    IF source_floor IS NULL OR source_floor < 0 OR node_change_gap IS NULL OR node_change_gap < 0 OR advance IS NULL THEN
        RAISE EXCEPTION 'fencekit: the token floor source and the node change gap must be non-negative numbers and advance true or false (got %, %, %)',
                coalesce(source_floor::text, 'NULL'), coalesce(node_change_gap::text, 'NULL'), coalesce(advance::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    IF NOT advance AND node_change_gap > 0 THEN
        RAISE EXCEPTION 'fencekit: the node change gap moves the token sequence: it needs advance'
            USING ERRCODE = '22023';
    END IF;
    node := fencekit_node();
    SELECT t.floor, t.checked_node INTO stored, checked_node_before FROM fencekit_token_floor t WHERE t.id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'fencekit: the token floor row is missing' USING ERRCODE = '55000';
    END IF;
    SELECT s.last_value, s.is_called INTO seq_last, seq_called FROM fencekit_token_seq s;
    next_token := CASE WHEN seq_called THEN seq_last + 1 ELSE seq_last END;

    IF NOT advance
       OR (next_token > GREATEST(stored, source_floor)
           AND (node_change_gap = 0 OR checked_node_before IS NOT DISTINCT FROM node)) THEN
        -- Nothing to advance (or not asked to): one UPDATE, which re-reads
        -- the row under its lock and records the node only if the sequence
        -- (read before) is above the floor it finds.
        UPDATE fencekit_token_floor t
           SET floor = GREATEST(t.floor, source_floor),
               updated_at = CASE WHEN source_floor > t.floor THEN clock_timestamp() ELSE t.updated_at END,
               checked_node = CASE WHEN next_token > GREATEST(t.floor, source_floor)
                                    AND (node_change_gap = 0 OR t.checked_node IS NOT DISTINCT FROM node)
                                   THEN node ELSE t.checked_node END
         WHERE t.id
        RETURNING t.floor, t.checked_node IS NOT DISTINCT FROM node AND next_token > t.floor
            INTO stored_floor, checked;
        IF advance AND NOT checked THEN
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
    IF node_change_gap > 0 AND checked_node_before IS DISTINCT FROM node THEN
        target := GREATEST(target, next_token - 1 + node_change_gap);
    END IF;
    UPDATE fencekit_token_floor t
       SET floor = target,
           updated_at = CASE WHEN target > t.floor THEN clock_timestamp() ELSE t.updated_at END,
           checked_node = node
     WHERE t.id;
    stored_floor := target;
    IF next_token <= target THEN
        advanced_from := next_token;
        PERFORM setval('fencekit_token_seq', target, true);
        next_token := target + 1;
    END IF;
    checked := true;
END
$fn$;

-- Version 8's signature, now the new function with advance true.
CREATE OR REPLACE FUNCTION fencekit_check_floor(source_floor bigint, node_change_gap bigint,
        OUT next_token bigint, OUT stored_floor bigint, OUT checked_node_now text,
        OUT checked_node_before text, OUT advanced_from bigint)
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER AS $fn$
BEGIN
    SELECT c.next_token, c.stored_floor, c.node, c.checked_node_before, c.advanced_from
      INTO next_token, stored_floor, checked_node_now, checked_node_before, advanced_from
      FROM fencekit_check_floor(source_floor, node_change_gap, true) c;
END
$fn$;

-- CREATE OR REPLACE keeps the owner and the grants but not the settings:
-- fix both functions' search_path again.
DO $do$
BEGIN
    EXECUTE format('ALTER FUNCTION fencekit_check_floor(bigint, bigint, boolean) SET search_path = %I, pg_catalog, pg_temp',
                   current_schema());
    EXECUTE format('ALTER FUNCTION fencekit_check_floor(bigint, bigint) SET search_path = %I, pg_catalog, pg_temp',
                   current_schema());
END
$do$;

-- Nobody but the owner until granted: GRANT EXECUTE ON FUNCTION
-- <schema>.fencekit_check_floor(bigint, bigint, boolean) TO <operator role>
-- (docs/operations.md, "Least-privilege role").
REVOKE ALL ON FUNCTION fencekit_check_floor(bigint, bigint, boolean) FROM PUBLIC;

CREATE TABLE IF NOT EXISTS fencekit_schema_migrations (
	set_name   text        NOT NULL,
	version    integer     NOT NULL,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (set_name, version));
INSERT INTO fencekit_schema_migrations (set_name, version, name) VALUES ('lease', 10, 'floor_check_advance')
    ON CONFLICT (set_name, version) DO NOTHING;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
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
-- +goose StatementEnd
