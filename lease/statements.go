package lease

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// statements holds the SQL text for one schema. The only interpolated text
// is the schema name, validated and quoted by migrations.QuoteIdentifier; every
// value is a bound parameter. Every statement samples the database clock
// once, in a CTE (a CTE calling a volatile function is evaluated once).
type statements struct {
	acquire, renew, release, inspect, renewBatch, releaseBatch string
	markContended                                              string // AcquireWait: ask the holder's release to notify
	takeover, displaced                                        string // Takeover and the cause of a refused renewal
	node                                                       string // Health: the node the floor was checked on, and this one
	channel                                                    string // NOTIFY channel for releases
}

func newStatements(qSchema, schema string) statements {
	r := strings.NewReplacer("$S", qSchema)
	st := statements{
		// $1 account, $2 session, $3 run_id, $4 ttl in microseconds, $5
		// holder label or NULL (migration 0005).
		//
		// The gate (migration 0004) reads the floor row and the node this
		// statement runs on (system identifier and database oid cached per
		// backend in the setting fencekit.system, timeline of the current
		// WAL position read per statement). The INSERT's token is drawn
		// before the row lock; it is used only when no row for the key
		// exists at insert time, which means no earlier grant of the key
		// exists (rows are never deleted by this package), so no earlier
		// grant can carry a larger token. Unless the floor was checked on
		// this node and that token is above the floor, the CASE calls
		// fencekit_refuse_grant, which raises FK002 or FK001 and fails the
		// statement before any row is written. On conflict the token is
		// drawn again in DO UPDATE SET, under the row lock: a statement that
		// drew its first value and then stalled still gets a value larger
		// than every grant committed while it waited (docs/lease.md, "Token
		// order"), and larger than the first value, hence above the floor
		// too. The clock is statement_timestamp(): one value per statement,
		// taken when it starts. A refusal returns no row; the caller then
		// reads the holder with the inspect statement (committed state).
		acquire: r.Replace(`INSERT INTO $S.fencekit_leases AS held
    (account_id, session_id, run_id, fence_token, acquired_at, renewed_at, expires_at, released_at, holder)
  SELECT $1::text, $2::text, $3::uuid,
         CASE WHEN g.checked = g.node AND g.v > g.floor THEN g.v
              ELSE $S.fencekit_refuse_grant(g.v, g.floor, g.checked, g.node) END,
         statement_timestamp(), statement_timestamp(),
         statement_timestamp() + $4::bigint * interval '1 microsecond', NULL, $5::text
    FROM (SELECT f.floor, f.checked_node AS checked,
                 coalesce(nullif(current_setting('fencekit.system', true), ''), $S.fencekit_system())
                   || '/' || left(pg_walfile_name(pg_current_wal_lsn()), 8) AS node,
                 nextval('$S.fencekit_token_seq') AS v
            FROM (SELECT) one LEFT JOIN $S.fencekit_token_floor f ON f.id) g
  ON CONFLICT (account_id, session_id) DO UPDATE SET
    run_id      = EXCLUDED.run_id,
    fence_token = nextval('$S.fencekit_token_seq'),
    acquired_at = EXCLUDED.acquired_at,
    renewed_at  = EXCLUDED.renewed_at,
    expires_at  = EXCLUDED.expires_at,
    released_at = NULL,
    holder      = EXCLUDED.holder
  WHERE held.expires_at <= EXCLUDED.acquired_at
RETURNING held.fence_token, held.expires_at`),

		// $1 account, $2 session, $3 run_id, $4 ttl µs.
		renew: r.Replace(`WITH now_db AS MATERIALIZED (SELECT clock_timestamp() AS t)
UPDATE $S.fencekit_leases l
   SET renewed_at = n.t, expires_at = n.t + $4::bigint * interval '1 microsecond'
  FROM now_db n
 WHERE l.account_id = $1::text AND l.session_id = $2::text AND l.run_id = $3::uuid
   AND l.released_at IS NULL AND l.expires_at > n.t
RETURNING l.fence_token, l.expires_at, n.t`),

		// $1 accounts, $2 sessions, $3 run_ids (text), $4 ttl µs. Rows are
		// locked in key order (the caller sorts), so two batches cannot
		// deadlock. Arrays are bound as text[] and cast here: pgx has no
		// text-format encoder for []uuid.UUID, and the exec and
		// simple_protocol modes (what poolers require) send every
		// parameter as text.
		renewBatch: r.Replace(`WITH now_db AS MATERIALIZED (SELECT clock_timestamp() AS t),
req AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]::uuid[]) AS q(account_id, session_id, run_id))
UPDATE $S.fencekit_leases l
   SET renewed_at = n.t, expires_at = n.t + $4::bigint * interval '1 microsecond'
  FROM now_db n, req q
 WHERE l.account_id = q.account_id AND l.session_id = q.session_id AND l.run_id = q.run_id
   AND l.released_at IS NULL AND l.expires_at > n.t
RETURNING l.account_id, l.session_id, l.run_id, l.expires_at`),

		// $1 account, $2 session, $3 run_id, $4 channel, $5 payload.
		// Releases only an unexpired lease of this run; the row is kept, with
		// expires_at moved to now (statement_timestamp(): one value per
		// statement). The NOTIFY is sent (at commit) from the RETURNING, so
		// it fires exactly when a release happened, and only if a waiter has
		// ever marked the key contended (migration 0003; the flag is sticky,
		// see there). When nothing was released no row comes back and the
		// caller reads the key's row with the inspect statement to explain
		// the outcome; a release reads no row beyond the one it updates.
		release: r.Replace(`UPDATE $S.fencekit_leases l
   SET released_at = statement_timestamp(), expires_at = statement_timestamp()
 WHERE l.account_id = $1::text AND l.session_id = $2::text AND l.run_id = $3::uuid
   AND l.released_at IS NULL AND l.expires_at > statement_timestamp()
RETURNING CASE WHEN l.contended THEN pg_notify($4::text, $5::text) END IS NULL`),

		// $1 accounts, $2 sessions, $3 run_ids (text, as in renewBatch), $4
		// channel, $5 payloads.
		releaseBatch: r.Replace(`WITH now_db AS MATERIALIZED (SELECT clock_timestamp() AS t),
req AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]::uuid[], $5::text[]) AS q(account_id, session_id, run_id, payload))
UPDATE $S.fencekit_leases l SET released_at = n.t, expires_at = n.t
  FROM now_db n, req q
 WHERE l.account_id = q.account_id AND l.session_id = q.session_id AND l.run_id = q.run_id
   AND l.released_at IS NULL AND l.expires_at > n.t
RETURNING CASE WHEN l.contended THEN pg_notify($4::text, q.payload) END`),

		// $1 account, $2 session, $3 holder's run_id or NULL (any holder).
		// Run by a waiter after a refused acquire, before it sleeps: flags
		// the live holder's row so that its release sends a NOTIFY. Zero
		// rows means the holder is already gone (released, expired or
		// replaced) and the waiter should retry at once. The row lock orders
		// this against the release.
		markContended: r.Replace(`UPDATE $S.fencekit_leases l SET contended = true
 WHERE l.account_id = $1::text AND l.session_id = $2::text
   AND ($3::uuid IS NULL OR l.run_id = $3::uuid)
   AND l.released_at IS NULL AND l.expires_at > clock_timestamp()
RETURNING true`),

		// $1 account, $2 session.
		inspect: r.Replace(`SELECT l.run_id, l.fence_token, l.acquired_at, l.renewed_at, l.expires_at, l.released_at, n.t, l.holder
  FROM (SELECT clock_timestamp() AS t) n
  LEFT JOIN $S.fencekit_leases l ON l.account_id = $1::text AND l.session_id = $2::text`),

		// $1 account, $2 session, $3 run_id, $4 ttl µs, $5 holder or NULL,
		// $6 channel, $7 payload. A grant whether or not the key is held:
		// the same gate as acquire (the INSERT's values, token floor and
		// node check, are computed before the conflict is detected), the
		// token drawn again under the row lock in DO UPDATE SET, and no
		// WHERE. The run it displaced while that run still held the key is
		// recorded on the key's row (displaced_run_id, migration 0005: the
		// last one only, for Watch), inserted into fencekit_displaced
		// (migration 0007: every one, for the displaced run's Manager to
		// ask by run_id; the data-modifying CTE runs whether or not the
		// outer query reads it) and notified on the channel
		// ("<payload>:taken:<run_id>", at commit), so that its Manager
		// cancels it at once.
		takeover: r.Replace(`WITH now_db AS MATERIALIZED (SELECT clock_timestamp() AS t),
gate AS MATERIALIZED (
  SELECT f.floor, f.checked_node AS checked,
         coalesce(nullif(current_setting('fencekit.system', true), ''), $S.fencekit_system())
           || '/' || left(pg_walfile_name(pg_current_wal_lsn()), 8) AS node,
         nextval('$S.fencekit_token_seq') AS v
    FROM (SELECT) one LEFT JOIN $S.fencekit_token_floor f ON f.id),
ins AS (
  INSERT INTO $S.fencekit_leases AS held
    (account_id, session_id, run_id, fence_token, acquired_at, renewed_at, expires_at, released_at, holder, displaced_run_id)
  SELECT $1::text, $2::text, $3::uuid,
         CASE WHEN g.checked = g.node AND g.v > g.floor THEN g.v
              ELSE $S.fencekit_refuse_grant(g.v, g.floor, g.checked, g.node) END,
         n.t, n.t, n.t + $4::bigint * interval '1 microsecond', NULL, $5::text, NULL
    FROM now_db n, gate g
  ON CONFLICT (account_id, session_id) DO UPDATE SET
    run_id      = EXCLUDED.run_id,
    fence_token = nextval('$S.fencekit_token_seq'),
    acquired_at = EXCLUDED.acquired_at,
    renewed_at  = EXCLUDED.renewed_at,
    expires_at  = EXCLUDED.expires_at,
    released_at = NULL,
    holder      = EXCLUDED.holder,
    displaced_run_id = CASE WHEN held.released_at IS NULL AND held.expires_at > EXCLUDED.acquired_at
                            THEN held.run_id END
  RETURNING held.fence_token, held.expires_at, held.displaced_run_id,
            CASE WHEN held.displaced_run_id IS NOT NULL
                 THEN pg_notify($6::text, $7::text || ':taken:' || held.displaced_run_id::text) END AS notified
),
gone AS (
  INSERT INTO $S.fencekit_displaced (run_id, account_id, session_id, displaced_at, by_run_id)
  SELECT i.displaced_run_id, $1::text, $2::text, n.t, $3::uuid
    FROM ins i, now_db n
   WHERE i.displaced_run_id IS NOT NULL
  ON CONFLICT (run_id) DO NOTHING)
SELECT i.fence_token, i.expires_at, i.displaced_run_id, n.t FROM ins i, now_db n`),

		// $1 accounts, $2 sessions, $3 run_ids as text (text[] binds in
		// every pgx QueryExecMode). Of the given runs, those a takeover
		// displaced while they held their key (migration 0007): asked after
		// a refused renewal, to report ErrTakenOver rather than ErrLost, and
		// by the listener each time it connects. One primary-key lookup per
		// run.
		displaced: r.Replace(`SELECT d.run_id::text
  FROM unnest($1::text[], $2::text[], $3::text[]) AS q(account_id, session_id, run_id)
  JOIN $S.fencekit_displaced d ON d.run_id = q.run_id::uuid
 WHERE d.account_id = q.account_id AND d.session_id = q.session_id`),

		// No parameters. The node the floor was last checked on (NULL if
		// never) and the node this statement runs on, computed as the
		// acquire statement's gate does; read-only (a standby fails it, as
		// it fails every grant).
		node: r.Replace(`SELECT f.checked_node,
       coalesce(nullif(current_setting('fencekit.system', true), ''), $S.fencekit_system())
         || '/' || left(pg_walfile_name(pg_current_wal_lsn()), 8)
  FROM (SELECT) one LEFT JOIN $S.fencekit_token_floor f ON f.id`),

		channel: channelName(schema),
	}
	return st
}

// channelName derives the release NOTIFY channel from the schema. Channel
// names are identifiers of at most 63 bytes; a long schema is hashed.
func channelName(schema string) string {
	const prefix = "fencekit_release_"
	if len(prefix)+len(schema) <= 63 {
		return prefix + schema
	}
	h := sha256.Sum256([]byte(schema))
	return prefix + hex.EncodeToString(h[:12])
}

// keyPayload is the NOTIFY payload identifying key: 32 hex characters of
// SHA-256(account NUL session) — far below PostgreSQL's 8000-byte limit for
// any key. NUL cannot occur in a valid id, so the encoding is unambiguous.
func keyPayload(k Key) string {
	h := sha256.New()
	h.Write([]byte(k.AccountID))
	h.Write([]byte{0})
	h.Write([]byte(k.SessionID))
	return hex.EncodeToString(h.Sum(nil)[:16])
}
