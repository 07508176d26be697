package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/fence"
)

// Renewal is the outcome of a successful renew.
type Renewal struct {
	Token     fence.Token
	ExpiresAt time.Time // database time
	DBNow     time.Time
	// TrustDeadline is sent_at + TTL − SafetyMargin on the local monotonic
	// clock, sent_at being taken before the request left.
	TrustDeadline time.Time
}

// Renew extends the lease of (key, runID) if that run still holds it
// unexpired. It is the run_id-addressed form for processes that do not keep
// a *Lease (CLIs); a Lease of this Manager with that run_id has its trust
// deadline extended too. Renewing is idempotent: a retry after a lost reply
// succeeds again while the run holds the lease. When the run does not
// (expired, released or taken over) the error matches ErrLost, and also
// ErrTakenOver when a Takeover displaced the run; nothing changes, and a
// Lease of this Manager with that run_id is cancelled with that cause.
//
// A run whose row is a heartbeat row (migration 0009) is only checked:
// its Manager's heartbeat keeps it, and the Renewal reports that
// heartbeat's expiry, with TrustDeadline sent_at + (ExpiresAt − DBNow) −
// SafetyMargin. For a lease of this Manager in heartbeat mode it is
// Lease.Renew.
func (m *Manager) Renew(ctx context.Context, key Key, runID uuid.UUID) (Renewal, error) {
	if err := key.Validate(); err != nil {
		return Renewal{}, err
	}
	if runID == uuid.Nil {
		return Renewal{}, ErrInvalidRunID
	}
	if m.isClosed() {
		return Renewal{}, ErrClosed
	}
	ctx, sp := m.startSpan(ctx, spanRenew, key)
	sp.run(runID, 0)
	var (
		r   Renewal
		err error
	)
	if l := m.lookup(key, runID); l != nil {
		r, err = m.ren.renew(ctx, l)
	} else {
		r, err = m.renewOne(ctx, key, runID)
	}
	sp.endRenew(r, err)
	return r, err
}

func (m *Manager) renewOne(ctx context.Context, key Key, runID uuid.UUID) (Renewal, error) {
	cctx, cancel := m.call(ctx)
	defer cancel()
	sentAt := time.Now()
	var (
		token    int64
		exp, now time.Time
	)
	err := m.pool.QueryRow(cctx, m.st.renew, key.AccountID, key.SessionID, uuidParam(runID), m.ttlMicros()).Scan(&token, &exp, &now)
	if errors.Is(err, pgx.ErrNoRows) {
		err = fmt.Errorf("%w: %s run %s no longer holds an unexpired lease", ErrLost, key, runID)
		if m.wasTakenOver(ctx, key, runID) {
			err = errTakenOverRenew(key, runID)
		}
	} else if err != nil {
		err = fmt.Errorf("lease: renew %s: %w", key, classify(err))
	}
	m.met.onRenew(ctx, time.Since(sentAt), err)
	if err != nil {
		m.log.Debug("lease renew failed", "key", key.String(), "run_id", runID, "err", err)
		return Renewal{}, err
	}
	if m.log.Enabled(ctx, slog.LevelDebug) {
		m.log.Debug("lease renewed", "key", key.String(), "run_id", runID)
	}
	// A per-lease row: exp − now = TTL. A heartbeat row: what is left of
	// its heartbeat, on the database clock (never more than TTL).
	left := min(exp.Sub(now), m.cfg.TTL)
	return Renewal{
		Token: fence.Token(token), ExpiresAt: exp, DBNow: now,
		TrustDeadline: sentAt.Add(left - m.cfg.SafetyMargin),
	}, nil
}
