-- Code generated from guard/0001_guard_marks.{up,down}.sql by go generate ./sql/migrations; DO NOT EDIT.
-- Apply with search_path set to the target schema; objects are unqualified.

-- +goose Up
-- +goose StatementBegin
-- fencekit PostgreSQL guard schema, version 1. May live in the same database
-- as the leases or in another one (next to the data it protects).

-- The high-water mark of each guarded resource: the highest fencing token a
-- write to it has committed with.
CREATE TABLE IF NOT EXISTS fencekit_guard_marks (
    resource      text        PRIMARY KEY,
    highest_token bigint      NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT fencekit_guard_marks_token_positive CHECK (highest_token > 0),
    CONSTRAINT fencekit_guard_marks_resource_len CHECK (octet_length(resource) BETWEEN 1 AND 512)
);

CREATE TABLE IF NOT EXISTS fencekit_schema_migrations (
	set_name   text        NOT NULL,
	version    integer     NOT NULL,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (set_name, version));
INSERT INTO fencekit_schema_migrations (set_name, version, name) VALUES ('guard', 1, 'guard_marks')
    ON CONFLICT (set_name, version) DO NOTHING;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DELETE FROM fencekit_schema_migrations WHERE set_name = 'guard' AND version = 1;
DO $fencekit$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM fencekit_schema_migrations) THEN
        DROP TABLE fencekit_schema_migrations;
    END IF;
END $fencekit$;

DROP TABLE IF EXISTS fencekit_guard_marks;
-- +goose StatementEnd
