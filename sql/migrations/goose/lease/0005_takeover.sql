-- Code generated from lease/0005_takeover.{up,down}.sql by go generate ./sql/migrations; DO NOT EDIT.
-- Apply with search_path set to the target schema; objects are unqualified.

-- +goose Up
-- +goose StatementBegin
-- fencekit lease schema, version 5: takeover and holder labels.
-- Plain SQL (goose / golang-migrate: use the generated ../goose, ../golang-migrate files), run with
-- search_path set to the lease schema.
--
-- holder is an optional label of the grant's holder ("desktop", "browser"),
-- validated by the Go side (lease.ValidateHolder) and bounded here too; it
-- belongs to the grant of run_id and is replaced by every grant.
-- displaced_run_id is the run a takeover (lease.Manager.Takeover) displaced
-- while it still held the key, so that the displaced run's refused renewal
-- can report lease.ErrTakenOver rather than a plain loss. Neither column is
-- indexed: grants and renewals stay HOT updates.
ALTER TABLE fencekit_leases ADD COLUMN IF NOT EXISTS holder text;
ALTER TABLE fencekit_leases ADD COLUMN IF NOT EXISTS displaced_run_id uuid;
ALTER TABLE fencekit_leases DROP CONSTRAINT IF EXISTS fencekit_leases_holder_len;
ALTER TABLE fencekit_leases ADD CONSTRAINT fencekit_leases_holder_len
    CHECK (holder IS NULL OR octet_length(holder) BETWEEN 1 AND 64);

CREATE TABLE IF NOT EXISTS fencekit_schema_migrations (
	set_name   text        NOT NULL,
	version    integer     NOT NULL,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (set_name, version));
INSERT INTO fencekit_schema_migrations (set_name, version, name) VALUES ('lease', 5, 'takeover')
    ON CONFLICT (set_name, version) DO NOTHING;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DELETE FROM fencekit_schema_migrations WHERE set_name = 'lease' AND version = 5;

-- Reverts version 5: drops the holder label and the displaced run.
ALTER TABLE fencekit_leases DROP CONSTRAINT IF EXISTS fencekit_leases_holder_len;
ALTER TABLE fencekit_leases DROP COLUMN IF EXISTS displaced_run_id;
ALTER TABLE fencekit_leases DROP COLUMN IF EXISTS holder;
-- +goose StatementEnd
