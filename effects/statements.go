package effects

import (
	"strings"

	"github.com/fencekit/fencekit/internal/leasesql"
)

// statements holds the SQL text for one schema (and the lease schema).
// The only interpolated text is the schema names, validated and quoted by
// migrations.QuoteIdentifier; every value is a bound parameter (arrays as
// text[], uuids as text, so every pgx exec mode works). The database clock
// is read once per statement, in a CTE.
type statements struct {
	lockTimeout, record, existing               string
	claim, outcomes, outcome                    string
	get, list, cancel, cancelDisplaced, requeue string
	deleteFinal, stats                          string
}

// columns an Info is scanned from (scanInfo), for the alias e.
const infoColumns = `e.id::text, e.target, e.account_id, e.session_id, e.run_id::text, e.fence_token, e.request_key,
       e.state, e.epoch, e.attempts, e.created_at, e.updated_at, e.next_at, e.first_sent_at, e.final_at,
       coalesce(e.outcome_code, 0), coalesce(e.outcome_detail, ''), coalesce(e.last_error, ''), coalesce(e.claimed_by, '')`

func newStatements(q, leaseQ string) statements {
	r := strings.NewReplacer("$S", q, "$L", leaseQ)
	return statements{
		lockTimeout: `SELECT set_config('lock_timeout', $1::text, true)`,

		// $1 target, $2 account, $3 session, $4 run_id, $5 token, $6
		// request key, $7 request, $8 channel, $9 the record span's
		// traceparent or NULL. The whole record in one
		// statement: lr reads and share-locks the key's lease row and says
		// whether the claim is its current grant, live on the database
		// clock (leasesql.Live, the definition lease.CheckClaimTx uses;
		// in READ COMMITTED a row updated while FOR SHARE waited is read
		// again in its new version). ins inserts only when it is; the
		// lock lasts until the transaction ends, so a grant to another
		// run waits for the commit. No id from ins with ok: the (lease
		// key, request key) was recorded before, and existing is that
		// effect (NULL when it committed after this statement's
		// snapshot: the caller reads it again). The NOTIFY is sent at
		// commit. Returns ok, the new id, the existing id, and whether
		// the existing effect has the same target and request.
		record: r.Replace(`WITH now_db AS MATERIALIZED (SELECT clock_timestamp() AS t),
lr AS MATERIALIZED (
  SELECT l.run_id = $4::text::uuid AND l.fence_token = $5::bigint
         AND ` + leasesql.Live("l", "n.t", "$L") + ` AS ok
    FROM $L.fencekit_leases l, now_db n
   WHERE l.account_id = $2::text AND l.session_id = $3::text
     FOR SHARE OF l),
ins AS (
  INSERT INTO $S.fencekit_effects AS e
      (target, account_id, session_id, run_id, fence_token, request_key, request, next_at, created_at, updated_at, traceparent)
  SELECT $1::text, $2::text, $3::text, $4::text::uuid, $5::bigint, $6::text, $7::bytea, n.t, n.t, n.t, $9::text
    FROM now_db n, lr
   WHERE lr.ok
  ON CONFLICT (account_id, session_id, request_key) DO NOTHING
  RETURNING e.id::text AS id, pg_notify($8::text, '') IS NULL AS notified)
SELECT coalesce((SELECT lr.ok FROM lr), false), (SELECT ins.id FROM ins WHERE ins.notified IS NOT NULL),
       x.id::text, coalesce(x.target = $1::text AND x.request = $7::bytea, false)
  FROM (SELECT 1) one
  LEFT JOIN $S.fencekit_effects x
    ON x.account_id = $2::text AND x.session_id = $3::text AND x.request_key = $6::text`),

		// $1 account, $2 session, $3 request key, $4 target, $5 request.
		existing: r.Replace(`SELECT e.id::text, e.target = $4::text AND e.request = $5::bytea
  FROM $S.fencekit_effects e
 WHERE e.account_id = $1::text AND e.session_id = $2::text AND e.request_key = $3::text`),

		// $1 targets (text[]), $2 limit, $3 relay name, $4 claim time µs,
		// $5 at-most-once targets (text[]). Claims due, unclaimed (or whose
		// claim expired) unfinished effects, skipping rows another relay
		// is claiming: raises the epoch, counts the attempt, marks the
		// first send time (committed before any send) and, for an
		// at-most-once target, the state sending. Returns the state the
		// row had before (sending: an earlier claim's send may have
		// happened), the clock and the record span's traceparent.
		claim: r.Replace(`WITH now_db AS MATERIALIZED (SELECT clock_timestamp() AS t),
due AS (
  SELECT e.id, e.state AS old_state
    FROM $S.fencekit_effects e, now_db n
   WHERE e.final_at IS NULL AND e.next_at <= n.t
     AND (e.claimed_until IS NULL OR e.claimed_until <= n.t)
     AND e.target = ANY($1::text[])
   ORDER BY e.next_at
   LIMIT $2
     FOR UPDATE OF e SKIP LOCKED)
UPDATE $S.fencekit_effects e
   SET epoch = e.epoch + 1, attempts = e.attempts + 1, claimed_by = $3::text,
       claimed_until = n.t + $4::bigint * interval '1 microsecond',
       first_sent_at = coalesce(e.first_sent_at, n.t), updated_at = n.t,
       state = CASE WHEN e.target = ANY($5::text[]) THEN 'sending' ELSE e.state END
  FROM due d, now_db n
 WHERE e.id = d.id
RETURNING e.id::text, e.epoch, e.target, e.request, e.attempts, e.first_sent_at, d.old_state, n.t, e.created_at, e.traceparent`),

		// $1 ids, $2 epochs, $3 states, $4 codes, $5 details, $6 errors
		// (NULL: none), $7 delays µs (arrays of one length, one element
		// per outcome), $8 outcome channel. The outcomes of a relay's
		// attempts in one statement: a final state (delivered, rejected,
		// ambiguous: outcome code and detail, final_at, a NOTIFY of the id
		// at commit for Await), or pending, a retry due after the delay
		// (outcome code and detail kept). Each row is written only under
		// its claim's epoch and while not final: a relay whose claim was
		// taken by another relay changes nothing. The claim ends. Returns
		// the ids written.
		outcomes: r.Replace(`WITH now_db AS MATERIALIZED (SELECT clock_timestamp() AS t),
o AS (SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::bigint[])
        AS o(id, epoch, state, code, detail, err, delay_us))
UPDATE $S.fencekit_effects e
   SET state = o.state,
       outcome_code = CASE WHEN o.state = 'pending' THEN e.outcome_code ELSE o.code::integer END,
       outcome_detail = CASE WHEN o.state = 'pending' THEN e.outcome_detail ELSE o.detail END,
       last_error = coalesce(o.err, e.last_error),
       next_at = CASE WHEN o.state = 'pending' THEN n.t + o.delay_us * interval '1 microsecond' ELSE e.next_at END,
       final_at = CASE WHEN o.state = 'pending' THEN NULL ELSE n.t END,
       updated_at = n.t, claimed_until = NULL
  FROM o, now_db n
 WHERE e.id = o.id::uuid AND e.epoch = o.epoch AND e.final_at IS NULL
RETURNING e.id::text, CASE WHEN o.state = 'pending' THEN true ELSE pg_notify($8::text, e.id::text) IS NULL END`),

		// outcomes for one effect, with scalars for the arrays ($1 id, $2
		// epoch, $3 state, $4 code, $5 detail, $6 error or NULL, $7 delay
		// µs, $8 channel): a lookup by primary key. The planner joins the
		// outcomes statement's unnest to the table through the partial
		// index of pending effects when the table's statistics are small
		// (a fresh or fast-growing table), scanning every pending effect
		// per write; an outcome written alone (DeliverEffect, or a relay's
		// outcome that found no write in flight) takes this one.
		outcome: r.Replace(`WITH now_db AS MATERIALIZED (SELECT clock_timestamp() AS t)
UPDATE $S.fencekit_effects e
   SET state = $3::text,
       outcome_code = CASE WHEN $3::text = 'pending' THEN e.outcome_code ELSE $4::bigint::integer END,
       outcome_detail = CASE WHEN $3::text = 'pending' THEN e.outcome_detail ELSE $5::text END,
       last_error = coalesce($6::text, e.last_error),
       next_at = CASE WHEN $3::text = 'pending' THEN n.t + $7::bigint * interval '1 microsecond' ELSE e.next_at END,
       final_at = CASE WHEN $3::text = 'pending' THEN NULL ELSE n.t END,
       updated_at = n.t, claimed_until = NULL
  FROM now_db n
 WHERE e.id = $1::text::uuid AND e.epoch = $2::bigint AND e.final_at IS NULL
RETURNING e.id::text, CASE WHEN $3::text = 'pending' THEN true ELSE pg_notify($8::text, e.id::text) IS NULL END`),

		// $1 id.
		get: r.Replace(`SELECT ` + infoColumns + ` FROM $S.fencekit_effects e WHERE e.id = $1::text::uuid`),

		// $1 state or NULL, $2 target or NULL, $3 account or NULL, $4
		// session or NULL, $5 limit.
		list: r.Replace(`SELECT ` + infoColumns + ` FROM $S.fencekit_effects e
 WHERE ($1::text IS NULL OR e.state = $1::text) AND ($2::text IS NULL OR e.target = $2::text)
   AND ($3::text IS NULL OR e.account_id = $3::text) AND ($4::text IS NULL OR e.session_id = $4::text)
 ORDER BY e.created_at DESC, e.id
 LIMIT $5`),

		// $1 id, $2 detail, $3 outcome channel. An operator's cancel: a pending effect no
		// relay holds a live claim on. The epoch is raised so that the
		// outcome of an earlier, expired claim is not written.
		cancel: r.Replace(`WITH now_db AS MATERIALIZED (SELECT clock_timestamp() AS t)
UPDATE $S.fencekit_effects e
   SET state = 'canceled', outcome_detail = $2::text, final_at = n.t, updated_at = n.t,
       epoch = e.epoch + 1, claimed_until = NULL
  FROM now_db n
 WHERE e.id = $1::text::uuid AND e.state = 'pending'
   AND (e.claimed_until IS NULL OR e.claimed_until <= n.t)
RETURNING pg_notify($3::text, e.id::text) IS NULL`),

		// $1 account, $2 session, $3 the new holder's token, $4 detail,
		// $5 outcome channel.
		// The new holder's cancel: effects of earlier grants of the key
		// that no relay has ever claimed (epoch 0). A relay's claim locks
		// the row and raises the epoch, so each effect is either canceled
		// here or claimed, never both.
		cancelDisplaced: r.Replace(`WITH now_db AS MATERIALIZED (SELECT clock_timestamp() AS t)
UPDATE $S.fencekit_effects e
   SET state = 'canceled', outcome_detail = $4::text, final_at = n.t, updated_at = n.t
  FROM now_db n
 WHERE e.account_id = $1::text AND e.session_id = $2::text AND e.fence_token < $3::bigint
   AND e.state = 'pending' AND e.epoch = 0
RETURNING e.id::text, pg_notify($5::text, e.id::text) IS NULL`),

		// $1 id. An operator's retry of an ambiguous or rejected effect:
		// pending again, due now, with a new dedup window; same id, same
		// idempotency key.
		requeue: r.Replace(`WITH now_db AS MATERIALIZED (SELECT clock_timestamp() AS t)
UPDATE $S.fencekit_effects e
   SET state = 'pending', final_at = NULL, next_at = n.t, first_sent_at = NULL, updated_at = n.t,
       claimed_until = NULL, outcome_code = NULL, outcome_detail = NULL
  FROM now_db n
 WHERE e.id = $1::text::uuid AND e.state IN ('ambiguous', 'rejected')
RETURNING true`),

		// $1 age µs, $2 limit. Final effects older than the age.
		deleteFinal: r.Replace(`DELETE FROM $S.fencekit_effects
 WHERE id IN (SELECT e.id FROM $S.fencekit_effects e
               WHERE e.final_at IS NOT NULL AND e.final_at < clock_timestamp() - $1::bigint * interval '1 microsecond'
               ORDER BY e.final_at LIMIT $2)`),

		// Counts by state, and the age of the oldest unfinished effect.
		stats: r.Replace(`SELECT e.state, count(*), coalesce(extract(epoch FROM clock_timestamp() - min(e.created_at)), 0)::float8
  FROM $S.fencekit_effects e
 GROUP BY e.state`),
	}
}
