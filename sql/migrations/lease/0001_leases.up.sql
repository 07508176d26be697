-- fencekit lease schema, version 1.
-- Plain SQL (goose / golang-migrate: use the generated ../goose, ../golang-migrate files). Names
-- are unqualified; fencekit's Migrate sets search_path to the chosen schema.

-- One token source for every lease key in this schema. CACHE 1 keeps values
-- increasing across backends (a cached range per backend would not), and NO
-- CYCLE makes exhaustion an error instead of a wrap to small values.
CREATE SEQUENCE IF NOT EXISTS fencekit_token_seq
    AS bigint MINVALUE 1 START WITH 1 INCREMENT BY 1 NO CYCLE CACHE 1;

-- One row per lease key. Rows are kept on release (released_at is set and
-- expires_at is moved to the release time) so that a statement that drew a
-- token before a later grant cannot insert a fresh row under the old token.
CREATE TABLE IF NOT EXISTS fencekit_leases (
    account_id  text        NOT NULL,
    session_id  text        NOT NULL,
    run_id      uuid        NOT NULL,
    fence_token bigint      NOT NULL,
    acquired_at timestamptz NOT NULL,
    renewed_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    released_at timestamptz,
    PRIMARY KEY (account_id, session_id),
    CONSTRAINT fencekit_leases_token_positive CHECK (fence_token > 0),
    CONSTRAINT fencekit_leases_account_len CHECK (octet_length(account_id) BETWEEN 1 AND 256),
    CONSTRAINT fencekit_leases_session_len CHECK (octet_length(session_id) BETWEEN 1 AND 256),
    CONSTRAINT fencekit_leases_run_nonzero CHECK (run_id <> '00000000-0000-0000-0000-000000000000')
);

-- Housekeeping scans released rows by age.
CREATE INDEX IF NOT EXISTS fencekit_leases_released_idx
    ON fencekit_leases (released_at) WHERE released_at IS NOT NULL;
