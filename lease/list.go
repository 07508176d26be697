package lease

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease/internal/leaseopt"
)

// DefaultListLimit is how many keys List returns without WithLimit.
const DefaultListLimit = 100

// listSQL reads one page of keys in one statement. $1 account or NULL, $2
// held only, $3/$4 the key to continue after or NULLs, $5 limit. One
// clock reading for every row.
func listSQL(qSchema string) string {
	return strings.ReplaceAll(`SELECT l.account_id, l.session_id, `+readColumns+`
  FROM (SELECT clock_timestamp() AS t) n
  JOIN $S.fencekit_leases l ON ($1::text IS NULL OR l.account_id = $1::text)
   AND (NOT $2::boolean OR `+liveSQL("l", "n.t")+`)
   AND ($3::text IS NULL OR (l.account_id, l.session_id) > ($3::text, $4::text))
  LEFT JOIN $S.fencekit_managers hb ON hb.manager_id = l.manager_id AND l.expires_at = 'infinity'
 ORDER BY l.account_id, l.session_id
 LIMIT $5::integer`, "$S", qSchema)
}

// List reads the keys of the schema from the database in one statement, in
// (AccountID, SessionID) order, with their state as Inspect reports it
// (every row judged on one reading of the database clock). Options select
// the keys: WithAccount, WithHeldOnly, WithAfter and WithLimit (default
// DefaultListLimit); without them it reads the first DefaultListLimit keys
// of every account. A full page may have more after it: call again with
// WithAfter its last key. It reads only; released and expired rows are
// listed until housekeeping deletes them (leaseops.Janitor).
func (m *Manager) List(ctx context.Context, opts ...Option) ([]Ownership, error) {
	o, err := applyOptions(leaseopt.List, opts)
	if err != nil {
		return nil, err
	}
	limit := DefaultListLimit
	if o.LimitSet {
		limit = o.Limit
	}
	if limit < 1 || limit > MaxBatch {
		return nil, fmt.Errorf("%w: WithLimit(%d): must be in 1..%d", ErrInvalidOption, limit, MaxBatch)
	}
	var account, afterAccount, afterSession *string
	if o.Account != "" {
		if err := validateID("AccountID", o.Account); err != nil {
			return nil, fmt.Errorf("%w: WithAccount: %w", ErrInvalidOption, err)
		}
		account = &o.Account
	}
	if after := (Key{AccountID: o.AfterAccount, SessionID: o.AfterSession}); after != (Key{}) {
		if err := after.Validate(); err != nil {
			return nil, fmt.Errorf("%w: WithAfter: %w", ErrInvalidOption, err)
		}
		afterAccount, afterSession = &o.AfterAccount, &o.AfterSession
	}
	if m.isClosed() {
		return nil, ErrClosed
	}
	cctx, cancel := m.call(ctx)
	defer cancel()
	rows, err := m.pool.Query(cctx, listSQL(m.cfg.qSchema), account, o.HeldOnly, afterAccount, afterSession, limit)
	if err != nil {
		return nil, fmt.Errorf("lease: list: %w", classify(err))
	}
	defer rows.Close()
	var out []Ownership
	for rows.Next() {
		var (
			k                  Key
			rid                uuid.UUID
			token              int64
			acq, ren, exp, now time.Time
			rel                *time.Time
			holder             *string
			parked             bool
		)
		if err := rows.Scan(&k.AccountID, &k.SessionID, &rid, &token, &acq, &ren, &exp, &rel, &now, &holder, &parked); err != nil {
			return nil, fmt.Errorf("lease: list: %w", err)
		}
		out = append(out, ownershipOf(k, rid, fence.Token(token), acq, ren, exp, rel, holder, now, parked))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("lease: list: %w", classify(err))
	}
	return out, nil
}

// ownershipOf is the state of a key's row at the database time now: the
// one rule Inspect, List and Watch report states by.
// parked is the row's parked mark (migration 0012), reported only while
// the grant is held.
func ownershipOf(key Key, runID uuid.UUID, token fence.Token, acq, ren, exp time.Time, rel *time.Time, holder *string, now time.Time, parked bool) Ownership {
	st := Ownership{Key: key, DBNow: now, RunID: runID, Token: token, AcquiredAt: acq, RenewedAt: ren, ExpiresAt: exp}
	if holder != nil {
		st.Holder = *holder
	}
	switch {
	case rel != nil:
		st.State, st.ReleasedAt = StateReleased, *rel
	case exp.After(now):
		st.State, st.Remaining, st.Parked = StateHeld, exp.Sub(now), parked
	default:
		st.State = StateExpired
	}
	return st
}
