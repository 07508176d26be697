-- Code generated from mcp/0001_mcp_requests.{up,down}.sql by go generate ./sql/migrations; DO NOT EDIT.
-- Apply with search_path set to the target schema; objects are unqualified.

DELETE FROM fencekit_schema_migrations WHERE set_name = 'mcp' AND version = 1;
DO $fencekit$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM fencekit_schema_migrations) THEN
        DROP TABLE fencekit_schema_migrations;
    END IF;
END $fencekit$;

DROP TABLE IF EXISTS fencekit_mcp_requests;
