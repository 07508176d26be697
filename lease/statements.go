package lease

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/fencekit/fencekit/internal/leasesql"
)

// statements holds the SQL text for one schema. The only interpolated text
// is the schema name, validated and quoted by migrations.QuoteIdentifier; every
// value is a bound parameter. Every statement samples the database clock
// once, in a CTE (a CTE calling a volatile function is evaluated once).
type statements struct {
	acquire, renew, release, inspect, renewBatch, releaseBatch string
	// acquireBatch is acquire for several keys at once (grantbatch.go),
	// by renewal mode: [0] heartbeat, [1] per-lease; releaseShared is
	// release for several runs at once.
	acquireBatch        [2]string
	releaseShared       string
	markContended       string // AcquireWait: ask the holder's release to notify
	takeover, displaced string // Takeover and the cause of a refused renewal
	park, resume        string // Lease.Park and Manager.Resume (park.go)
	node                string // Health: the node the floor was checked on, and this one
	channel             string // NOTIFY channel for releases
	// Heartbeat mode (heartbeat.go): create an epoch, renew it (one
	// statement per period, with the epoch's displaced and revoked runs),
	// read those runs alone (the listener's catch-up), end it at Close.
	epochCreate, beat, epochDisplaced, epochEnd string
}

// liveSQL is the one definition of a live lease row (leasesql.Live) for
// the row alias row at the database time now; $S is the quoted schema.
func liveSQL(row, now string) string { return leasesql.Live(row, now, "$S") }

// grantLiveSQL is liveSQL as a grant (Acquire, Takeover) decides it, on
// the version of the key's row that ON CONFLICT locked. That is the newest
// committed version, but a sub-select reads the statement's snapshot, in
// which a heartbeat epoch created after the statement began is missing: a
// grant that stalled could read such a fresh holder's epoch as gone and
// grant the key twice (the model's broken-hb-snapshot trail). So a row
// granted at or after this statement began is live: its grant started
// after this statement's snapshot was taken, under an epoch live then. A
// renewal that commits after the snapshot is covered by the heartbeat
// statement's margin (it renews only an epoch with more than CallTimeout
// left) and by the holder's trust (docs/lease.md, "One heartbeat per
// Manager").
func grantLiveSQL(row, now string) string {
	return `(` + row + `.released_at IS NULL AND (` + row + `.acquired_at >= statement_timestamp() OR CASE WHEN ` + row + `.expires_at = 'infinity'
    THEN coalesce((SELECT hb.expires_at FROM $S.fencekit_managers hb WHERE hb.manager_id = ` + row + `.manager_id) > ` + now + `, false)
    ELSE ` + row + `.expires_at > ` + now + ` END))`
}

// expirySQL is the expiry a row reports (Inspect, List, Watch, a grant's
// ExpiresAt): its expires_at, or for a heartbeat row its manager's
// expires_at (its acquired_at when the manager row is gone: dead since
// then at the latest), so that held ⇔ not released and expiry > now agrees
// with liveSQL.
func expirySQL(row string) string {
	return `CASE WHEN ` + row + `.expires_at = 'infinity'
    THEN coalesce((SELECT hb.expires_at FROM $S.fencekit_managers hb WHERE hb.manager_id = ` + row + `.manager_id), ` + row + `.acquired_at)
    ELSE ` + row + `.expires_at END`
}

// nodeSQL is the node a grant statement runs on, as the token floor gate
// compares it with the node the floor was checked on (migration 0004):
// system identifier and database oid cached per backend in the setting
// fencekit.system, and the timeline of the current WAL position.
const nodeSQL = `coalesce(nullif(current_setting('fencekit.system', true), ''), $S.fencekit_system())
           || '/' || left(pg_walfile_name(pg_current_wal_lsn()), 8)`

// regrantSQL is the ON CONFLICT DO UPDATE SET list of every grant
// statement (acquire, acquireBatch, takeover): the new run, a token drawn
// again under the row lock, and the row made live again.
const regrantSQL = `    run_id      = EXCLUDED.run_id,
    fence_token = nextval('$S.fencekit_token_seq'),
    acquired_at = EXCLUDED.acquired_at,
    renewed_at  = EXCLUDED.renewed_at,
    expires_at  = EXCLUDED.expires_at,
    released_at = NULL,
    holder      = EXCLUDED.holder,
    manager_id  = EXCLUDED.manager_id`

// notParkedSQL excludes a parked row (migration 0012: parked iff
// parked_run_id = run_id). Renewals carry it, so that a renewal sent before
// a park, and landing after it, finds nothing to renew: it can neither
// shorten nor extend the parked expiry. Grants do not need it: a grant
// writes a new run_id, after which the mark no longer matches.
func notParkedSQL(row string) string {
	return `(` + row + `.parked_run_id IS NULL OR ` + row + `.parked_run_id <> ` + row + `.run_id)`
}

// epochLiveSQL requires the granting Manager's epoch ($n, NULL in per-lease
// mode) to be unexpired at now, so that a heartbeat row is never written
// for an epoch that is already dead.
func epochLiveSQL(param, now string) string {
	return `(` + param + `::uuid IS NULL OR EXISTS (SELECT 1 FROM $S.fencekit_managers hb WHERE hb.manager_id = ` + param + `::uuid AND hb.expires_at > ` + now + `))`
}

func newStatements(qSchema, schema string) statements {
	r := strings.NewReplacer("$S", qSchema)
	st := statements{
		// $1 account, $2 session, $3 run_id, $4 ttl in microseconds, $5
		// holder label or NULL (migration 0005), $6 the Manager's heartbeat
		// epoch or NULL (per-lease mode, migration 0009).
		//
		// In heartbeat mode the row names the epoch and expires_at is
		// 'infinity': it is live while the epoch is (liveSQL). The SELECT
		// yields no row, so nothing is written, when the epoch is not live
		// at the statement's time; the caller then renews its heartbeat and
		// retries once with a new epoch if that was refused. A key is
		// granted only when its row is not live (liveSQL, the one
		// definition), judged under the row lock. A heartbeat grant returns
		// no expiry (NULL): the Manager reports its epoch's, which it knows
		// (a lookup here cost the lease cycle measurably).
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
    (account_id, session_id, run_id, fence_token, acquired_at, renewed_at, expires_at, released_at, holder, manager_id)
  SELECT $1::text, $2::text, $3::uuid,
         CASE WHEN g.checked = g.node AND g.v > g.floor THEN g.v
              ELSE $S.fencekit_refuse_grant(g.v, g.floor, g.checked, g.node) END,
         statement_timestamp(), statement_timestamp(),
         CASE WHEN $6::uuid IS NULL THEN statement_timestamp() + $4::bigint * interval '1 microsecond'
              ELSE 'infinity'::timestamptz END,
         NULL, $5::text, $6::uuid
    FROM (SELECT f.floor, f.checked_node AS checked,
                 ` + nodeSQL + ` AS node,
                 nextval('$S.fencekit_token_seq') AS v
            FROM (SELECT) one LEFT JOIN $S.fencekit_token_floor f ON f.id) g
   WHERE ` + epochLiveSQL("$6", "statement_timestamp()") + `
  ON CONFLICT (account_id, session_id) DO UPDATE SET
` + regrantSQL + `
  WHERE NOT ` + grantLiveSQL("held", "EXCLUDED.acquired_at") + `
RETURNING held.fence_token, CASE WHEN held.expires_at <> 'infinity' THEN held.expires_at END`),

		// $1 account, $2 session, $3 run_id, $4 ttl µs.
		// A heartbeat row (expires_at 'infinity') is only checked, not
		// extended (its epoch's heartbeat extends it); the expiry returned
		// is its epoch's. A parked row (migration 0012) is refused
		// (notParkedSQL).
		renew: r.Replace(`WITH now_db AS MATERIALIZED (SELECT clock_timestamp() AS t)
UPDATE $S.fencekit_leases l
   SET renewed_at = CASE WHEN l.expires_at = 'infinity' THEN l.renewed_at ELSE n.t END,
       expires_at = CASE WHEN l.expires_at = 'infinity' THEN l.expires_at
                         ELSE n.t + $4::bigint * interval '1 microsecond' END
  FROM now_db n
 WHERE l.account_id = $1::text AND l.session_id = $2::text AND l.run_id = $3::uuid
   AND ` + liveSQL("l", "n.t") + ` AND ` + notParkedSQL("l") + `
RETURNING l.fence_token, ` + expirySQL("l") + `, n.t`),

		// $1 accounts, $2 sessions, $3 run_ids (text), $4 ttl µs. Rows are
		// locked in key order (the caller sorts), so two batches cannot
		// deadlock. Arrays are bound as text[] and cast here: pgx has no
		// text-format encoder for []uuid.UUID, and the exec and
		// simple_protocol modes (what poolers require) send every
		// parameter as text. A parked row is refused (notParkedSQL).
		renewBatch: r.Replace(`WITH now_db AS MATERIALIZED (SELECT clock_timestamp() AS t),
req AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]::uuid[]) AS q(account_id, session_id, run_id))
UPDATE $S.fencekit_leases l
   SET renewed_at = n.t, expires_at = n.t + $4::bigint * interval '1 microsecond'
  FROM now_db n, req q
 WHERE l.account_id = q.account_id AND l.session_id = q.session_id AND l.run_id = q.run_id
   AND l.released_at IS NULL AND l.expires_at > n.t AND ` + notParkedSQL("l") + `
RETURNING l.account_id, l.session_id, l.run_id, l.expires_at`),

		// $1 account, $2 session, $3 run_id, $4 channel, $5 payload.
		// Releases only a live lease of this run (liveSQL: a heartbeat row
		// whose epoch expired is left alone and reports ReleaseExpired, as an
		// expired per-lease row does); the row is kept, with
		// expires_at moved to now (statement_timestamp(): one value per
		// statement). The NOTIFY is sent (at commit) from the RETURNING, so
		// it fires exactly when a release happened, and only if a waiter has
		// ever marked the key contended (migration 0003; the flag is sticky,
		// see there). When nothing was released no row comes back and the
		// caller reads the key's row with the inspect statement to explain
		// the outcome; a release reads no row beyond the one it updates and,
		// for a heartbeat row, its epoch's.
		release: r.Replace(`UPDATE $S.fencekit_leases l
   SET released_at = statement_timestamp(), expires_at = statement_timestamp()
 WHERE l.account_id = $1::text AND l.session_id = $2::text AND l.run_id = $3::uuid
   AND ` + liveSQL("l", "statement_timestamp()") + `
RETURNING CASE WHEN l.contended THEN pg_notify($4::text, $5::text) END IS NULL`),

		// release for several runs of distinct keys at once (grantbatch.go):
		// $1 accounts, $2 sessions, $3 run_ids (text, as in renewBatch), $4
		// payloads, $5 channel. Row by row it decides exactly as release
		// does, and returns the run_id of each run it released. Rows are
		// locked in key order, as the sorted sub-select feeds the join;
		// the arrays reach unnest through an OFFSET 0 sub-select so that
		// the generic plan is kept (see acquireBatchSQL).
		releaseShared: r.Replace(`UPDATE $S.fencekit_leases l
   SET released_at = statement_timestamp(), expires_at = statement_timestamp()
  FROM (SELECT q.account_id, q.session_id, q.run_id, q.payload
          FROM (SELECT $1::text[] AS a, $2::text[] AS s, $3::text[]::uuid[] AS r, $4::text[] AS p OFFSET 0) x,
               unnest(x.a, x.s, x.r, x.p) AS q(account_id, session_id, run_id, payload)
         ORDER BY q.account_id, q.session_id) q
 WHERE l.account_id = q.account_id AND l.session_id = q.session_id AND l.run_id = q.run_id
   AND ` + liveSQL("l", "statement_timestamp()") + `
RETURNING l.run_id, CASE WHEN l.contended THEN pg_notify($5::text, q.payload) END IS NULL`),

		// $1 accounts, $2 sessions, $3 run_ids (text, as in renewBatch), $4
		// channel, $5 payloads.
		releaseBatch: r.Replace(`WITH now_db AS MATERIALIZED (SELECT clock_timestamp() AS t),
req AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]::uuid[], $5::text[]) AS q(account_id, session_id, run_id, payload))
UPDATE $S.fencekit_leases l SET released_at = n.t, expires_at = n.t
  FROM now_db n, req q
 WHERE l.account_id = q.account_id AND l.session_id = q.session_id AND l.run_id = q.run_id
   AND ` + liveSQL("l", "n.t") + `
RETURNING CASE WHEN l.contended THEN pg_notify($4::text, q.payload) END`),

		// $1 account, $2 session, $3 holder's run_id or NULL (any holder).
		// Run by a waiter after a refused acquire, before it sleeps: flags
		// the live holder's row so that its release sends a NOTIFY. Zero
		// rows means the holder is already gone (released, expired or
		// replaced) and the waiter should retry at once. The row lock orders
		// this against the release.
		markContended: r.Replace(`WITH now_db AS MATERIALIZED (SELECT clock_timestamp() AS t)
UPDATE $S.fencekit_leases l SET contended = true
  FROM now_db n
 WHERE l.account_id = $1::text AND l.session_id = $2::text
   AND ($3::uuid IS NULL OR l.run_id = $3::uuid)
   AND ` + liveSQL("l", "n.t") + `
RETURNING true`),

		// $1 account, $2 session. A heartbeat row reports its epoch's
		// renewal and expiry (readColumns).
		inspect: r.Replace(`SELECT ` + readColumns + `
  FROM (SELECT clock_timestamp() AS t) n
  LEFT JOIN $S.fencekit_leases l ON l.account_id = $1::text AND l.session_id = $2::text
  LEFT JOIN $S.fencekit_managers hb ON hb.manager_id = l.manager_id AND l.expires_at = 'infinity'`),

		// $1 account, $2 session, $3 run_id, $4 ttl µs, $5 holder or NULL,
		// $6 channel, $7 payload, $8 the Manager's heartbeat epoch or NULL
		// (per-lease mode; written and checked as in acquire). A grant
		// whether or not the key is held:
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
		// cancels it at once. A displaced heartbeat row's epoch is kept in
		// displaced_manager_id (RETURNING cannot read the overwritten
		// manager_id) and recorded with the run, so that the displaced
		// run's Manager learns it from its next heartbeat statement even
		// when the notification is lost.
		takeover: r.Replace(`WITH now_db AS MATERIALIZED (SELECT clock_timestamp() AS t),
gate AS MATERIALIZED (
  SELECT f.floor, f.checked_node AS checked,
         ` + nodeSQL + ` AS node,
         nextval('$S.fencekit_token_seq') AS v
    FROM (SELECT) one LEFT JOIN $S.fencekit_token_floor f ON f.id),
ins AS (
  INSERT INTO $S.fencekit_leases AS held
    (account_id, session_id, run_id, fence_token, acquired_at, renewed_at, expires_at, released_at, holder,
     displaced_run_id, manager_id, displaced_manager_id)
  SELECT $1::text, $2::text, $3::uuid,
         CASE WHEN g.checked = g.node AND g.v > g.floor THEN g.v
              ELSE $S.fencekit_refuse_grant(g.v, g.floor, g.checked, g.node) END,
         n.t, n.t,
         CASE WHEN $8::uuid IS NULL THEN n.t + $4::bigint * interval '1 microsecond' ELSE 'infinity'::timestamptz END,
         NULL, $5::text, NULL, $8::uuid, NULL
    FROM now_db n, gate g
   WHERE ` + epochLiveSQL("$8", "n.t") + `
  ON CONFLICT (account_id, session_id) DO UPDATE SET
` + regrantSQL + `,
    displaced_run_id = CASE WHEN ` + grantLiveSQL("held", "EXCLUDED.acquired_at") + ` THEN held.run_id END,
    displaced_manager_id = CASE WHEN held.expires_at = 'infinity' AND ` + grantLiveSQL("held", "EXCLUDED.acquired_at") + `
                                THEN held.manager_id END
  RETURNING held.fence_token, ` + expirySQL("held") + ` AS expires_at, held.displaced_run_id, held.displaced_manager_id,
            CASE WHEN held.displaced_run_id IS NOT NULL
                 THEN pg_notify($6::text, $7::text || ':taken:' || held.displaced_run_id::text) END AS notified
),
gone AS (
  INSERT INTO $S.fencekit_displaced (run_id, account_id, session_id, displaced_at, by_run_id, manager_id, cause)
  SELECT i.displaced_run_id, $1::text, $2::text, n.t, $3::uuid, i.displaced_manager_id, 'taken'
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
 WHERE d.account_id = q.account_id AND d.session_id = q.session_id
   AND d.cause IS DISTINCT FROM 'revoked'`),

		// No parameters. The node the floor was last checked on (NULL if
		// never) and the node this statement runs on, computed as the
		// acquire statement's gate does; read-only (a standby fails it, as
		// it fails every grant).
		node: r.Replace(`SELECT f.checked_node,
       coalesce(nullif(current_setting('fencekit.system', true), ''), $S.fencekit_system())
         || '/' || left(pg_walfile_name(pg_current_wal_lsn()), 8)
  FROM (SELECT) one LEFT JOIN $S.fencekit_token_floor f ON f.id`),

		// $1 epoch id, $2 holder label or NULL, $3 ttl µs. A new epoch,
		// live for one TTL from the statement's clock.
		epochCreate: r.Replace(`INSERT INTO $S.fencekit_managers AS m (manager_id, holder, started_at, renewed_at, expires_at)
SELECT $1::uuid, $2::text, n.t, n.t, n.t + $3::bigint * interval '1 microsecond'
  FROM (SELECT clock_timestamp() AS t) n
RETURNING m.started_at, m.expires_at`),

		// $1 epoch id, $2 ttl µs, $3 CallTimeout µs, $4 since (database
		// time). The heartbeat: ONE statement per period however many
		// leases the epoch holds. It renews the epoch only while more than
		// CallTimeout of it is left: the Manager trusts a reply only within
		// CallTimeout of sending, so a renewal it trusts has committed
		// before the expiry it extended, and a grant whose snapshot saw
		// that expiry pass cannot have missed it (docs/lease.md). The first
		// row is the renewal (none when refused: the epoch is over); then
		// the runs of this epoch a takeover displaced or Revoke revoked
		// since $4 (by the epoch's index: rows read grow with the epoch's
		// own leases, not with the schema's takeovers); and one row with
		// cause 'legacy' (no run) when an earlier release's takeover
		// displaced any run since $4 (cause NULL: that release does not
		// know manager_id), reading at most one such record: the Manager
		// then asks for its own runs by run_id (endLegacyDisplaced).
		beat: r.Replace(`WITH now_db AS MATERIALIZED (SELECT clock_timestamp() AS t),
hb AS (
  UPDATE $S.fencekit_managers m
     SET renewed_at = n.t, expires_at = n.t + $2::bigint * interval '1 microsecond'
    FROM now_db n
   WHERE m.manager_id = $1::uuid AND m.expires_at > n.t + $3::bigint * interval '1 microsecond'
  RETURNING n.t, m.expires_at)
SELECT h.t, h.expires_at, NULL::text AS run_id, NULL::text AS cause FROM hb h
UNION ALL
SELECT NULL, NULL, d.run_id::text, d.cause FROM $S.fencekit_displaced d
 WHERE d.manager_id = $1::uuid AND d.displaced_at >= $4::timestamptz
UNION ALL
SELECT NULL, NULL, NULL, 'legacy'
 WHERE EXISTS (SELECT 1 FROM $S.fencekit_displaced d WHERE d.cause IS NULL AND d.displaced_at >= $4::timestamptz)`),

		// $1 epoch id, $2 since. The beat's second part alone: the
		// listener's catch-up after it (re)connects, by epoch, not by a
		// list of held runs.
		epochDisplaced: r.Replace(`SELECT d.run_id::text, d.cause FROM $S.fencekit_displaced d
 WHERE d.manager_id = $1::uuid AND d.displaced_at >= $2::timestamptz
UNION ALL
SELECT NULL, 'legacy'
 WHERE EXISTS (SELECT 1 FROM $S.fencekit_displaced d WHERE d.cause IS NULL AND d.displaced_at >= $2::timestamptz)`),

		// $1 epoch id. Close: the epoch ends now (never later than it
		// would have), so rows its release at Close missed are free at once.
		epochEnd: r.Replace(`UPDATE $S.fencekit_managers SET expires_at = least(expires_at, clock_timestamp())
 WHERE manager_id = $1::uuid`),

		// $1 account, $2 session, $3 run_id, $4 idle µs, $5 the epoch the
		// run's grant named, or NULL (per-lease mode). Parks the run's live
		// row (liveSQL) unless it is parked already: same run_id and token,
		// not released, expires_at = now + idle on the database clock,
		// manager_id NULL (no heartbeat keeps it, nothing renews it), the
		// parked mark set (migration 0012). With an epoch, only a row that
		// still names that epoch: a retry after a lost reply (unreleased.go)
		// cannot park a row another Manager resumed meanwhile. A row it does
		// not change returns nothing; the caller reads the key's row to say
		// why (parked already: the retry of a park that committed).
		park: r.Replace(`WITH now_db AS MATERIALIZED (SELECT clock_timestamp() AS t)
UPDATE $S.fencekit_leases l
   SET expires_at = n.t + $4::bigint * interval '1 microsecond', renewed_at = n.t,
       manager_id = NULL, parked_run_id = l.run_id
  FROM now_db n
 WHERE l.account_id = $1::text AND l.session_id = $2::text AND l.run_id = $3::uuid
   AND ` + notParkedSQL("l") + `
   AND ($5::uuid IS NULL OR l.manager_id = $5::uuid)
   AND ` + liveSQL("l", "n.t") + `
RETURNING l.expires_at`),

		// $1 account, $2 session, $3 run_id, $4 ttl µs, $5 holder label or
		// NULL (keep the row's), $6 the Manager's heartbeat epoch or NULL
		// (per-lease mode). Takes the run's parked, unexpired row into this
		// Manager, as a grant would write it (a heartbeat row of the epoch,
		// written only while the epoch is live: epochLiveSQL; or a per-lease
		// row expiring one TTL from now), and clears the parked mark.
		// run_id and fence_token are kept: no token is drawn, so the token
		// floor and node gate, which guard the tokens a grant draws, do not
		// apply (a resumed run presents the token its grant drew, as a
		// renewed one does). acquired_at is set to the statement's start,
		// as a grant sets it, so that a grant statement that began before
		// this one and meets the row under its lock judges it live
		// (grantLiveSQL) although its snapshot may predate the epoch.
		// A parked row is never a heartbeat row, so the plain finite-expiry
		// test is liveSQL here. Concurrent resumes of one run: the first
		// to lock the row clears the mark, the other re-reads the row under
		// the lock, finds it no longer parked and changes nothing.
		resume: r.Replace(`UPDATE $S.fencekit_leases l
   SET manager_id = $6::uuid,
       expires_at = CASE WHEN $6::uuid IS NULL THEN statement_timestamp() + $4::bigint * interval '1 microsecond'
                         ELSE 'infinity'::timestamptz END,
       acquired_at = statement_timestamp(), renewed_at = statement_timestamp(),
       parked_run_id = NULL, holder = coalesce($5::text, l.holder)
 WHERE l.account_id = $1::text AND l.session_id = $2::text AND l.run_id = $3::uuid
   AND l.parked_run_id = l.run_id AND l.released_at IS NULL AND l.expires_at > statement_timestamp()
   AND ` + epochLiveSQL("$6", "statement_timestamp()") + `
RETURNING l.fence_token, CASE WHEN l.expires_at <> 'infinity' THEN l.expires_at END, l.holder`),

		channel: channelName(schema),
	}
	st.acquireBatch = [2]string{r.Replace(acquireBatchSQL(true)), r.Replace(acquireBatchSQL(false))}
	return st
}

// acquireBatchSQL is the acquire statement for several keys of one Manager
// at once (grantbatch.go): $1 accounts, $2 sessions, $3 run_ids (text, as
// in renewBatch), $4 holder labels (NULL: none), $5 the epoch (heartbeat)
// or the ttl in µs (per-lease). Row by row it decides exactly as acquire
// does: the same gate (floor and node read once for the statement, a token
// drawn per row before the row lock and again under it on conflict), the
// same epoch check, the same grantLiveSQL under the row lock, the same
// statement_timestamp(). Rows are locked in key order, so two batches
// cannot deadlock with each other; the caller passes distinct keys (ON
// CONFLICT cannot update one row twice). A granted row returns its run_id,
// token and (per-lease) expiry; a refused key returns nothing. The
// renewal mode is fixed in the text rather than tested on $5, and the
// arrays reach unnest through an OFFSET 0 sub-select, so that a custom plan
// cannot see their length: the server's generic plan then costs what a
// custom one does and is the one chosen from the sixth execution on (a
// plan per execution costs more than the grants it carries).
func acquireBatchSQL(heartbeat bool) string {
	expires, epochCheck, manager := `statement_timestamp() + $5::bigint * interval '1 microsecond'`, `TRUE`, `NULL::uuid`
	if heartbeat {
		expires = `'infinity'::timestamptz`
		epochCheck = `EXISTS (SELECT 1 FROM $S.fencekit_managers hb WHERE hb.manager_id = $5::uuid AND hb.expires_at > statement_timestamp())`
		manager = `$5::uuid`
	}
	return `INSERT INTO $S.fencekit_leases AS held
    (account_id, session_id, run_id, fence_token, acquired_at, renewed_at, expires_at, released_at, holder, manager_id)
  SELECT k.account_id, k.session_id, k.run_id,
         CASE WHEN g.checked = g.node AND k.v > g.floor THEN k.v
              ELSE $S.fencekit_refuse_grant(k.v, g.floor, g.checked, g.node) END,
         statement_timestamp(), statement_timestamp(), ` + expires + `, NULL, k.holder, ` + manager + `
    FROM (SELECT f.floor, f.checked_node AS checked,
                 ` + nodeSQL + ` AS node
            FROM (SELECT) one LEFT JOIN $S.fencekit_token_floor f ON f.id) g,
         (SELECT q.account_id, q.session_id, q.run_id, q.holder, nextval('$S.fencekit_token_seq') AS v
            FROM (SELECT $1::text[] AS a, $2::text[] AS s, $3::text[]::uuid[] AS r, $4::text[] AS h OFFSET 0) p,
                 unnest(p.a, p.s, p.r, p.h) AS q(account_id, session_id, run_id, holder)) k
   WHERE ` + epochCheck + `
   ORDER BY k.account_id, k.session_id
  ON CONFLICT (account_id, session_id) DO UPDATE SET
` + regrantSQL + `
  WHERE NOT ` + grantLiveSQL("held", "EXCLUDED.acquired_at") + `
RETURNING held.run_id, held.fence_token, CASE WHEN held.expires_at <> 'infinity' THEN held.expires_at END`
}

// readColumns are the columns Inspect, List and Watch read of a key's row
// l (LEFT JOIN fencekit_managers hb for heartbeat rows) at n.t: run_id,
// token, acquired_at, renewed_at and expires_at as the row reports them
// (expirySQL; a heartbeat row's renewal is its epoch's last beat),
// released_at, the clock, holder, and whether the row is parked (migration
// 0012).
const readColumns = `l.run_id, l.fence_token, l.acquired_at,
       CASE WHEN l.expires_at = 'infinity' THEN greatest(l.renewed_at, hb.renewed_at) ELSE l.renewed_at END,
       CASE WHEN l.expires_at = 'infinity' THEN coalesce(hb.expires_at, l.acquired_at) ELSE l.expires_at END,
       l.released_at, n.t, l.holder, coalesce(l.parked_run_id = l.run_id, false)`

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
	var buf [2*MaxIDLen + 1]byte // a valid key fits; a longer one is appended to the heap
	b := append(append(append(buf[:0], k.AccountID...), 0), k.SessionID...)
	sum := sha256.Sum256(b)
	var out [32]byte
	hex.Encode(out[:], sum[:16])
	return string(out[:])
}
