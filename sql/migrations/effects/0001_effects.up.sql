-- fencekit effects schema, version 1: the outbox of fenced effects.
-- Plain SQL (goose / golang-migrate: use the generated ../goose, ../golang-migrate files), run with
-- search_path set to the effects schema. Package effects records a row here
-- only in a transaction that also checked, and share-locked, the producer's
-- lease row (lease.CheckClaimTx): the lease set must live in the same
-- database.
--
-- One row per effect. A relay claims due rows (FOR UPDATE SKIP LOCKED),
-- raising epoch and setting claimed_until; it writes an outcome only while
-- epoch is still its claim's. state is one of pending (due at next_at),
-- sending (an at-most-once target's send may be in flight), and the final
-- states delivered, rejected, ambiguous and canceled.
CREATE TABLE IF NOT EXISTS fencekit_effects (
    id             uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    target         text        NOT NULL,
    account_id     text        NOT NULL,
    session_id     text        NOT NULL,
    run_id         uuid        NOT NULL,
    fence_token    bigint      NOT NULL,
    request_key    text        NOT NULL,
    request        bytea       NOT NULL,
    state          text        NOT NULL DEFAULT 'pending',
    epoch          bigint      NOT NULL DEFAULT 0,
    attempts       integer     NOT NULL DEFAULT 0,
    claimed_by     text,
    claimed_until  timestamptz,
    next_at        timestamptz NOT NULL,
    first_sent_at  timestamptz,
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL,
    final_at       timestamptz,
    outcome_code   integer,
    outcome_detail text,
    last_error     text,
    CONSTRAINT fencekit_effects_state CHECK (state IN ('pending', 'sending', 'delivered', 'rejected', 'ambiguous', 'canceled')),
    CONSTRAINT fencekit_effects_final CHECK ((final_at IS NULL) = (state IN ('pending', 'sending'))),
    CONSTRAINT fencekit_effects_request_key_len CHECK (octet_length(request_key) BETWEEN 1 AND 255),
    CONSTRAINT fencekit_effects_target_len CHECK (octet_length(target) BETWEEN 1 AND 128),
    CONSTRAINT fencekit_effects_token_positive CHECK (fence_token > 0)
);

-- A request key names one effect per lease key: a second record with the
-- same (lease key, request key) returns the first effect's id.
CREATE UNIQUE INDEX IF NOT EXISTS fencekit_effects_request_key_idx
    ON fencekit_effects (account_id, session_id, request_key);

-- What relays claim: unfinished rows by due time.
CREATE INDEX IF NOT EXISTS fencekit_effects_due_idx
    ON fencekit_effects (next_at) WHERE final_at IS NULL;

-- Retention deletes final rows by age.
CREATE INDEX IF NOT EXISTS fencekit_effects_final_idx
    ON fencekit_effects (final_at) WHERE final_at IS NOT NULL;
