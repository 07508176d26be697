package effects

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease"
)

// State is an effect's state.
type State string

// The states. Pending and Sending are not final; the others are, and a
// final effect never changes again (except by an operator's Retry).
const (
	// StatePending: recorded, waiting for (or between) deliveries.
	StatePending State = "pending"
	// StateSending: an at-most-once target's send may be in flight.
	StateSending State = "sending"
	// StateDelivered: the target accepted the request.
	StateDelivered State = "delivered"
	// StateRejected: the target refused the request for good.
	StateRejected State = "rejected"
	// StateAmbiguous: the target may or may not have acted, and sending
	// again could act twice (the target's dedup window passed with the
	// outcome unknown, or an at-most-once send was interrupted). A person
	// or a reconciliation decides; Retry sends it again with the same key.
	StateAmbiguous State = "ambiguous"
	// StateCanceled: canceled before any relay claimed it (or by an
	// operator); never sent.
	StateCanceled State = "canceled"
)

// Final reports whether s is a final state.
func (s State) Final() bool {
	switch s {
	case StateDelivered, StateRejected, StateAmbiguous, StateCanceled:
		return true
	}
	return false
}

// Info is an effect as stored. Times are the database's.
type Info struct {
	ID         uuid.UUID
	Target     string
	Key        lease.Key
	Run        string      // the producer's run_id
	Token      fence.Token // the producer's token
	RequestKey string
	State      State
	Epoch      int64 // relay claims so far
	Attempts   int   // deliveries attempted (claims)
	CreatedAt  time.Time
	UpdatedAt  time.Time
	NextAt     time.Time  // when a pending effect is due
	FirstSent  *time.Time // first claim for delivery, nil before
	FinalAt    *time.Time // nil while not final
	Code       int        // the target's status or reply code of the outcome, 0 when none
	Detail     string     // the outcome's explanation, shortened
	LastError  string     // the last delivery error, shortened
	ClaimedBy  string     // the relay of the last claim
}

// IdempotencyKey is the key every delivery of the effect carries (the
// HTTP deliverer's Idempotency-Key header): derived from the id alone, so
// every redelivery, by any relay, carries the same one.
func IdempotencyKey(id uuid.UUID) string { return "fencekit-" + id.String() }

func scanInfo(row pgx.Row) (Info, error) {
	var (
		in            Info
		id, run, st   string
		token         int64
		first, finalT *time.Time
	)
	err := row.Scan(&id, &in.Target, &in.Key.AccountID, &in.Key.SessionID, &run, &token, &in.RequestKey,
		&st, &in.Epoch, &in.Attempts, &in.CreatedAt, &in.UpdatedAt, &in.NextAt, &first, &finalT,
		&in.Code, &in.Detail, &in.LastError, &in.ClaimedBy)
	if err != nil {
		return in, err
	}
	in.ID, err = uuid.Parse(id)
	in.Run, in.Token, in.State, in.FirstSent, in.FinalAt = run, fence.Token(token), State(st), first, finalT
	return in, err
}

func checkCtx(ctx context.Context, op string) error {
	if ctx == nil {
		return fmt.Errorf("effects: %s with nil ctx: %w", op, fence.ErrNilArgument)
	}
	return fence.ContextError(ctx)
}

// Get returns the effect id. A missing effect matches fence.ErrNotFound.
func (o *Outbox) Get(ctx context.Context, id uuid.UUID) (Info, error) {
	if err := checkCtx(ctx, "Get"); err != nil {
		return Info{}, err
	}
	in, err := scanInfo(o.pool.QueryRow(ctx, o.st.get, id.String()))
	if errors.Is(err, pgx.ErrNoRows) {
		return Info{}, fmt.Errorf("effects: effect %s: %w", id, fence.ErrNotFound)
	}
	if err != nil {
		return Info{}, o.dbError(ctx, "get", err)
	}
	return in, nil
}

// Await waits until effect id is final and returns it. It is woken by the
// NOTIFY the outcome's statement sends (one LISTEN connection per Outbox,
// opened by the first waiting Await, closed by the last) and reads the
// effect's state every Config.AwaitPoll as a fallback (a listener that
// cannot connect, a transaction-pooling proxy that drops notifications).
// It returns ctx's error (matching its cause) when
// ctx ends first, and an error matching fence.ErrNotFound for a missing
// effect. Await never calls the target; only relays do.
func (o *Outbox) Await(ctx context.Context, id uuid.UUID) (Info, error) {
	if err := checkCtx(ctx, "Await"); err != nil {
		return Info{}, err
	}
	wake := o.aw.register(o, id) //nolint:contextcheck // the shared listener outlives this caller's ctx: the last waiter stops it
	defer o.aw.unregister(id, wake)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return Info{}, fence.ContextError(ctx)
		case <-t.C:
		case <-wake:
		}
		in, err := o.Get(ctx, id)
		if err != nil || in.State.Final() {
			return in, err
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(o.awaitPoll)
	}
}

// ListOptions filters List. Empty fields match everything.
type ListOptions struct {
	State  State
	Target string
	Key    lease.Key // AccountID and SessionID filter independently
	Limit  int       // default 100, at most 10000
}

// List returns effects matching opts, newest first.
func (o *Outbox) List(ctx context.Context, opts ListOptions) ([]Info, error) {
	if err := checkCtx(ctx, "List"); err != nil {
		return nil, err
	}
	limit := opts.Limit
	switch {
	case limit == 0:
		limit = 100
	case limit < 0 || limit > 10000:
		return nil, &InputError{Field: "Limit", Reason: fmt.Sprintf("%d not in 1..10000", limit)}
	}
	rows, err := o.pool.Query(ctx, o.st.list, nullable(string(opts.State)), nullable(opts.Target),
		nullable(opts.Key.AccountID), nullable(opts.Key.SessionID), limit)
	if err != nil {
		return nil, o.dbError(ctx, "list", err)
	}
	defer rows.Close()
	var out []Info
	for rows.Next() {
		in, err := scanInfo(rows)
		if err != nil {
			return nil, o.dbError(ctx, "list", err)
		}
		out = append(out, in)
	}
	if err := rows.Err(); err != nil {
		return nil, o.dbError(ctx, "list", err)
	}
	return out, nil
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// Cancel cancels effect id, an operator's decision: only a pending effect
// that no relay holds a live claim on (ErrNotPending otherwise; a missing
// effect matches fence.ErrNotFound). An effect some relay claimed before
// may already have been sent by it: Cancel then only stops further
// deliveries. The displaced-run policy is CancelDisplaced.
func (o *Outbox) Cancel(ctx context.Context, id uuid.UUID, reason string) error {
	err := o.operatorUpdate(ctx, "cancel", o.st.cancel, id, shorten("canceled: "+reason), o.outcomes)
	if err == nil {
		o.obs.canceledN(ctx, 1)
	}
	return err
}

// Retry makes an ambiguous or rejected effect pending again, due now, with
// a new dedup window: an operator's decision (it may act twice at the
// target when the first send did act and the target's window passed).
// The same id, hence the same idempotency key, is sent. ErrNotPending for
// any other state.
func (o *Outbox) Retry(ctx context.Context, id uuid.UUID) error {
	return o.operatorUpdate(ctx, "retry", o.st.requeue, id)
}

func (o *Outbox) operatorUpdate(ctx context.Context, op, sql string, id uuid.UUID, args ...any) error {
	if err := checkCtx(ctx, op); err != nil {
		return err
	}
	var ok bool
	err := o.pool.QueryRow(ctx, sql, append([]any{id.String()}, args...)...).Scan(&ok)
	if errors.Is(err, pgx.ErrNoRows) {
		in, gerr := o.Get(ctx, id)
		if gerr != nil {
			return gerr
		}
		return fmt.Errorf("effects: %s %s (state %s): %w", op, id, in.State, ErrNotPending)
	}
	if err != nil {
		return o.dbError(ctx, op, err)
	}
	return nil
}

// CancelDisplaced is the new holder's policy for what a displaced run
// recorded: it cancels the effects recorded under a token below that of
// the claim ctx carries (fence.ClaimFromContext, as Record takes it; the
// lease key is the claim's scope) that no relay has claimed yet, and
// returns their ids. The claim must be the current grant of its key
// (checked, in the same transaction, with lease.CheckClaimTx: a displaced
// run cannot cancel its successor's effects). A relay's claim and this
// cancel lock the same row, so each effect is either canceled here, and
// never sent, or already claimed, and delivered as usual. Errors are
// Record's (no claim, stale claim, busy, bad input).
func (o *Outbox) CancelDisplaced(ctx context.Context) ([]uuid.UUID, error) {
	claim, err := claimFromContext(ctx, "CancelDisplaced")
	if err != nil {
		return nil, err
	}
	if err := claim.Validate(); err != nil {
		return nil, err
	}
	key, err := KeyFromScope(claim.Scope)
	if err != nil {
		return nil, err
	}
	tx, err := o.pool.Begin(ctx)
	if err != nil {
		return nil, fence.WrapContext(ctx, fmt.Errorf("effects: begin: %w", err))
	}
	defer rollback(ctx, tx)
	if _, err := tx.Exec(ctx, o.st.lockTimeout, o.lockTimeout); err != nil {
		return nil, o.dbError(ctx, "set lock_timeout", err)
	}
	if err := lease.CheckClaimTx(ctx, tx, o.leaseSchema, key, claim); err != nil {
		return nil, fmt.Errorf("effects: cancel displaced: %w", err)
	}
	rows, err := tx.Query(ctx, o.st.cancelDisplaced, key.AccountID, key.SessionID, int64(claim.Token),
		fmt.Sprintf("canceled by the key's new holder (run %s, token %d)", claim.Run, claim.Token), o.outcomes)
	if err != nil {
		return nil, o.dbError(ctx, "cancel displaced", err)
	}
	var ids []uuid.UUID
	for rows.Next() {
		var (
			s        string
			notified bool
		)
		if err := rows.Scan(&s, &notified); err != nil {
			rows.Close()
			return nil, o.dbError(ctx, "cancel displaced", err)
		}
		id, err := uuid.Parse(s)
		if err != nil {
			rows.Close()
			return nil, err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, o.dbError(ctx, "cancel displaced", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fence.OutcomeUnknown(ctx, "effects: commit cancel", key.Scope(), err)
	}
	o.obs.canceledN(ctx, len(ids))
	return ids, nil
}

// DeleteFinal deletes at most limit final effects whose final time is
// older than age (retention), oldest first, and returns how many it
// deleted. Pending and sending effects are never deleted. A deleted
// effect's request key can be recorded again as a new effect.
func (o *Outbox) DeleteFinal(ctx context.Context, age time.Duration, limit int) (int64, error) {
	if err := checkCtx(ctx, "DeleteFinal"); err != nil {
		return 0, err
	}
	if age < 0 || limit <= 0 {
		return 0, &InputError{Field: "DeleteFinal", Reason: "age must be >= 0 and limit > 0"}
	}
	tag, err := o.pool.Exec(ctx, o.st.deleteFinal, age.Microseconds(), limit)
	if err != nil {
		return 0, o.dbError(ctx, "delete final", err)
	}
	return tag.RowsAffected(), nil
}

// Stats is a snapshot of the effects table.
type Stats struct {
	ByState map[State]int64
	// OldestPending is the age of the oldest effect not yet final
	// (pending or sending), 0 when there is none.
	OldestPending time.Duration
}

// Stats counts effects by state and reports the oldest unfinished one's
// age. It reads the whole table: call it from a metrics scrape, not per
// request.
func (o *Outbox) Stats(ctx context.Context) (Stats, error) {
	if err := checkCtx(ctx, "Stats"); err != nil {
		return Stats{}, err
	}
	rows, err := o.pool.Query(ctx, o.st.stats)
	if err != nil {
		return Stats{}, o.dbError(ctx, "stats", err)
	}
	defer rows.Close()
	s := Stats{ByState: map[State]int64{}}
	for rows.Next() {
		var (
			st  string
			n   int64
			age float64
		)
		if err := rows.Scan(&st, &n, &age); err != nil {
			return Stats{}, o.dbError(ctx, "stats", err)
		}
		s.ByState[State(st)] = n
		if !State(st).Final() {
			if d := time.Duration(age * float64(time.Second)); d > s.OldestPending {
				s.OldestPending = d
			}
		}
	}
	return s, rows.Err()
}
