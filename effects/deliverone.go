package effects

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/sql/migrations"
)

// EffectResult is what Relay.DeliverEffect did with one effect.
type EffectResult struct {
	// Attempted is true when this call claimed the effect (raising its
	// epoch, as a relay's claim does) and made an attempt.
	Attempted bool
	// State is the effect's state after the call; empty when no effect
	// has the id (never recorded, or deleted by DeleteFinal).
	State State
	// Due is, for an effect that is not final, how long until it is due
	// again (its retry backoff), on the database clock; 0 when it is due
	// now or is final.
	Due time.Duration
	// ClaimedElsewhere is true when, after the call, a relay other than
	// this call holds a live claim on the effect (it is delivering it).
	ClaimedElsewhere bool
}

// DeliverEffect claims effect id and makes one delivery attempt, exactly as
// a running relay does for each effect it claims: the claim (FOR UPDATE
// SKIP LOCKED, the epoch raised, the attempt counted, at-most-once targets
// set sending) commits before the Deliverer is called, and the outcome is
// written only under that claim's epoch. It claims nothing, and sends
// nothing, when the effect is missing, final, not due yet (retry backoff),
// held under another relay's live claim, locked by a concurrent claim, or
// for a target r does not serve; the result then says why. The relay need
// not be started: DeliverEffect is for callers that learn of an effect by
// other means (a job queue's worker, see effects/rivereffects) while the
// effect row stays the only record of what was sent. Errors are the
// database's (the claim or the state read failed); an attempt's own
// failure is recorded as the effect's outcome, not returned.
func (r *Relay) DeliverEffect(ctx context.Context, id uuid.UUID) (EffectResult, error) {
	if ctx == nil {
		return EffectResult{}, fmt.Errorf("effects: DeliverEffect with nil ctx: %w", fence.ErrNilArgument)
	}
	if id == uuid.Nil {
		return EffectResult{}, &InputError{Field: "ID", Reason: "nil uuid"}
	}
	st, err := r.oneStatements()
	if err != nil {
		return EffectResult{}, err
	}
	started := time.Now()
	var (
		c   claimed
		ids string
	)
	err = r.o.pool.QueryRow(ctx, st.claimOne, r.names, r.cfg.Name, r.cfg.ClaimFor.Microseconds(), r.amo, id.String()).
		Scan(&ids, &c.epoch, &c.target, &c.request, &c.attempts, &c.firstSent, &c.oldState, &c.now, &c.created, &c.traceparent)
	var res EffectResult
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return EffectResult{}, r.o.dbError(ctx, "claim effect", err)
	default:
		c.id, c.started = id, started
		r.stats.claimed.Add(1)
		r.attempt(ctx, nil, c)
		res.Attempted = true
	}
	var (
		state   string
		dueUS   int64
		claimed bool
	)
	err = r.o.pool.QueryRow(ctx, st.due, id.String()).Scan(&state, &dueUS, &claimed)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return res, nil
	case err != nil:
		return res, r.o.dbError(ctx, "read effect", err)
	}
	res.State = State(state)
	res.ClaimedElsewhere = claimed && !res.Attempted
	if dueUS > 0 {
		res.Due = time.Duration(dueUS) * time.Microsecond
	}
	return res, nil
}

// oneStatements are DeliverEffect's statements for r's schema.
type oneStatements struct{ claimOne, due string }

func (r *Relay) oneStatements() (oneStatements, error) {
	q, err := migrations.QuoteIdentifier(r.o.schema)
	if err != nil {
		return oneStatements{}, err
	}
	s := strings.NewReplacer("$S", q)
	return oneStatements{
		// $1 targets (text[]), $2 relay name, $3 claim time µs, $4
		// at-most-once targets (text[]), $5 id. The relay's claim
		// statement for one row.
		claimOne: s.Replace(`WITH now_db AS MATERIALIZED (SELECT clock_timestamp() AS t),
due AS (
  SELECT e.id, e.state AS old_state
    FROM $S.fencekit_effects e, now_db n
   WHERE e.id = $5::text::uuid AND e.final_at IS NULL AND e.next_at <= n.t
     AND (e.claimed_until IS NULL OR e.claimed_until <= n.t)
     AND e.target = ANY($1::text[])
     FOR UPDATE OF e SKIP LOCKED)
UPDATE $S.fencekit_effects e
   SET epoch = e.epoch + 1, attempts = e.attempts + 1, claimed_by = $2::text,
       claimed_until = n.t + $3::bigint * interval '1 microsecond',
       first_sent_at = coalesce(e.first_sent_at, n.t), updated_at = n.t,
       state = CASE WHEN e.target = ANY($4::text[]) THEN 'sending' ELSE e.state END
  FROM due d, now_db n
 WHERE e.id = d.id
RETURNING e.id::text, e.epoch, e.target, e.request, e.attempts, e.first_sent_at, d.old_state, n.t, e.created_at, e.traceparent`),
		// $1 id. The state, µs until the effect is due (0 when final),
		// and whether a live claim holds it.
		due: s.Replace(`WITH now_db AS MATERIALIZED (SELECT clock_timestamp() AS t)
SELECT e.state,
       CASE WHEN e.final_at IS NOT NULL THEN 0
            ELSE greatest(0, (extract(epoch FROM e.next_at - n.t) * 1000000)::bigint) END,
       e.final_at IS NULL AND coalesce(e.claimed_until > n.t, false)
  FROM $S.fencekit_effects e, now_db n WHERE e.id = $1::text::uuid`),
	}, nil
}
