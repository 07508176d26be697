-- Code generated from mcp/0001_mcp_requests.{up,down}.sql by go generate ./sql/migrations; DO NOT EDIT.
-- Apply with search_path set to the target schema; objects are unqualified.

-- +goose Up
-- +goose StatementBegin
-- fencekit mcp schema, version 1: the results of tools/call requests that
-- named a request id (package mcpfence, _meta "io.fencekit/request").
-- Plain SQL (goose / golang-migrate: use the generated ../goose, ../golang-migrate files), run with
-- search_path set to the schema of the lease set: mcpfence inserts a row
-- here only in a transaction that also checked, and share-locked, the
-- call's lease row (lease.CheckClaimTx), so both sets live in one database.
--
-- One row per (account, conversation, request id). state 'running': the
-- call that inserted the row (run_id, fence_token) holds the lease and its
-- tool may be running; 'done': result holds the call's CallToolResult as
-- JSON. call_hash is the SHA-256 of the tool name and the arguments: a
-- later call with the same request id and another hash is a conflict.
CREATE TABLE IF NOT EXISTS fencekit_mcp_requests (
    account_id  text        NOT NULL,
    session_id  text        NOT NULL,
    request_id  text        NOT NULL,
    call_hash   bytea       NOT NULL,
    state       text        NOT NULL DEFAULT 'running',
    result      bytea,
    run_id      uuid        NOT NULL,
    fence_token bigint      NOT NULL,
    created_at  timestamptz NOT NULL,
    done_at     timestamptz,
    PRIMARY KEY (account_id, session_id, request_id),
    CONSTRAINT fencekit_mcp_requests_state CHECK (state IN ('running', 'done')),
    CONSTRAINT fencekit_mcp_requests_done CHECK ((state = 'done') = (result IS NOT NULL AND done_at IS NOT NULL)),
    CONSTRAINT fencekit_mcp_requests_request_id_len CHECK (octet_length(request_id) BETWEEN 1 AND 255),
    CONSTRAINT fencekit_mcp_requests_hash_len CHECK (octet_length(call_hash) = 32),
    CONSTRAINT fencekit_mcp_requests_result_len CHECK (result IS NULL OR octet_length(result) <= 4194304),
    CONSTRAINT fencekit_mcp_requests_token_positive CHECK (fence_token > 0)
);

-- Retention deletes rows by age.
CREATE INDEX IF NOT EXISTS fencekit_mcp_requests_created_idx
    ON fencekit_mcp_requests (created_at);

CREATE TABLE IF NOT EXISTS fencekit_schema_migrations (
	set_name   text        NOT NULL,
	version    integer     NOT NULL,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (set_name, version));
INSERT INTO fencekit_schema_migrations (set_name, version, name) VALUES ('mcp', 1, 'mcp_requests')
    ON CONFLICT (set_name, version) DO NOTHING;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DELETE FROM fencekit_schema_migrations WHERE set_name = 'mcp' AND version = 1;
DO $fencekit$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM fencekit_schema_migrations) THEN
        DROP TABLE fencekit_schema_migrations;
    END IF;
END $fencekit$;

DROP TABLE IF EXISTS fencekit_mcp_requests;
-- +goose StatementEnd
