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
