package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease/internal/leasemetrics"
)

// The grant path shared by Acquire, AcquireWait and Takeover: they check
// the key, options and authorization, then call grant with the statement
// to send.

// grantKind is the statement a grant sends: the conditional acquire, which
// grants a free key only, or the takeover, which grants it in any case.
type grantKind bool

const (
	grantAcquire  grantKind = false
	grantTakeover grantKind = true
)

func (k grantKind) String() string {
	if k == grantTakeover {
		return "takeover"
	}
	return "acquire"
}

// grant runs the grant statement of kind for key, once more when the
// statement granted nothing because this Manager's heartbeat had ended in
// the database, and once more after the Manager's own floor check when the
// database refused the grant on an unchecked node (floorCheckAfter). It
// records the call's round trip (fencekit.lease.acquire.duration).
func (m *Manager) grant(ctx context.Context, kind grantKind, key Key, o grantOptions) (*Lease, error) {
	start := time.Now()
	l, err := m.grantOnce(ctx, kind, key, o)
	if err != nil && m.floorCheckAfter(ctx, &err) { // refused on an unchecked node: checked now
		l, err = m.grantOnce(ctx, kind, key, o)
	}
	m.met.onAcquireDone(ctx, time.Since(start), err)
	return l, err
}

// grantOnce runs grantAttempt, and once more when it asks for a retry.
func (m *Manager) grantOnce(ctx context.Context, kind grantKind, key Key, o grantOptions) (*Lease, error) {
	l, retry, err := m.grantAttempt(ctx, kind, key, o)
	if retry { // this Manager's heartbeat had ended: once more with a new one
		l, _, err = m.grantAttempt(ctx, kind, key, o)
	}
	return l, err
}

// sentGrant is what a grant statement returned: a token, the (per-lease)
// expiry and the displaced run (takeover) when granted, pgx.ErrNoRows when
// nothing was granted, or the statement's error. sent is false when the
// statement was never sent; left is true when ctx ended while the grant was
// in a statement shared with other callers (grantbatch.go), whose sender
// releases it once its outcome is known.
type sentGrant struct {
	token      int64
	expires    pgtype.Timestamptz // NULL for a heartbeat row (the epoch's expiry)
	displaced  *uuid.UUID
	sent, left bool
	err        error
}

// sendGrant sends kind's statement for run, bounded by CallTimeout. The
// acquire statement goes through the coalescer (grantbatch.go); the
// takeover statement is sent alone.
func (m *Manager) sendGrant(ctx context.Context, kind grantKind, key Key, run uuid.UUID, holder string, ep *epoch) sentGrant {
	if kind == grantAcquire {
		g, sent, left := m.grants.do(ctx, grantReq{key: key, run: run, holder: nullable(holder), ep: ep})
		return sentGrant{token: g.token, expires: g.expires, sent: sent, left: left, err: g.err}
	}
	cctx, cancel := m.call(ctx)
	defer cancel()
	g := sentGrant{sent: true}
	var now time.Time
	g.err = m.pool.QueryRow(cctx, m.st.takeover, key.AccountID, key.SessionID, uuidParam(run), m.ttlMicros(),
		nullable(holder), m.st.channel, keyPayload(key), epochID(ep)).Scan(&g.token, &g.expires, &g.displaced, &now)
	return g
}

// grantAttempt runs one grant statement of kind. retry is true when the
// statement granted nothing because the Manager's heartbeat epoch had
// ended in the database (taken away): a fresh epoch may grant at once.
func (m *Manager) grantAttempt(ctx context.Context, kind grantKind, key Key, o grantOptions) (_ *Lease, retry bool, _ error) {
	runID, err := uuid.NewRandom()
	if err != nil {
		return nil, false, fmt.Errorf("lease: new run_id: %w", err)
	}
	ep, err := m.ren.grantEpoch(ctx)
	if err != nil {
		m.met.onRefused(ctx, leasemetrics.ReasonError)
		return nil, false, fmt.Errorf("lease: %s %s: %w", kind, key, err)
	}
	m.awaitListener(ctx)
	m.beginGrant(runID)
	defer m.endGrant(runID)
	sentAt := time.Now() // before the request leaves (or queues): the trust window starts here
	g := m.sendGrant(ctx, kind, key, runID, o.Holder, ep)
	err = g.err
	if !g.sent || g.left {
		err = ctx.Err() // ctx ended while the grant was queued, or in a shared statement
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows) && kind == grantTakeover:
		// Nothing written: only a grant naming an epoch that was not live
		// at the statement's time writes nothing.
		if m.ren.grantGone(ctx, ep) {
			return nil, true, fmt.Errorf("lease: takeover %s: this Manager's heartbeat ended: %w", key, ErrLost)
		}
		return nil, false, fmt.Errorf("lease: takeover %s: granted nothing although this Manager's renewal is live", key)
	case errors.Is(err, pgx.ErrNoRows):
		// Refused: the key is held. Read the holder (committed state).
		held := &HeldError{Key: key}
		st, ierr := m.inspect(ctx, key)
		if ierr == nil && st.State == StateHeld {
			held.RunID, held.Token, held.ExpiresAt, held.Remaining, held.Holder = st.RunID, st.Token, st.ExpiresAt, st.Remaining, st.Holder
		} else if ierr == nil && m.ren.grantGone(ctx, ep) {
			return nil, true, held // the statement refused this Manager's dead heartbeat, not a holder
		}
		m.observe(event{kind: evHeld, key: key})
		m.met.onRefused(ctx, leasemetrics.ReasonHeld)
		return nil, false, held
	case grantRefusal(err) != nil:
		// The database refused the grant (token floor or unchecked node,
		// migration 0004): the statement failed as a whole, no row written.
		m.observe(event{kind: evAcquireFailed, key: key})
		return nil, false, m.grantRefused(ctx, key, grantRefusal(err))
	case err != nil:
		// The statement may have committed with the reply lost: free the
		// row of this run_id (a per-lease row expires by TTL otherwise; a
		// heartbeat row is retried by the release loop, unreleased.go).
		// Not when nothing was sent, nor when ctx ended while the grant
		// was in a shared statement: that statement's sender does it once
		// its outcome is known (grantbatch.go).
		if g.sent && !g.left {
			m.releaseOrphan(ctx, key, runID, ep)
		}
		m.observe(event{kind: evAcquireFailed, key: key})
		m.met.onRefused(ctx, leasemetrics.ReasonError)
		m.log.Debug("lease "+kind.String()+" failed", "key", key.String(), "err", err)
		return nil, false, fmt.Errorf("lease: %s %s: %w", kind, key, classify(err))
	}
	if g.displaced != nil {
		m.traceDisplaced(ctx, *g.displaced)
		if old := m.leaseOrGrant(*g.displaced, ErrTakenOver); old != nil && old.key == key {
			old.end(ErrTakenOver)
		}
	}
	var exp time.Time
	if g.expires.Valid {
		exp = g.expires.Time
	}
	l := m.newLease(ctx, key, runID, fence.Token(g.token), o.Holder, exp, sentAt, ep)
	if l == nil { // closed while granting
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.CallTimeout)
		defer rcancel()
		_, _ = m.release(rctx, key, runID)
		return nil, false, ErrClosed
	}
	m.refusals.checked(m)
	m.met.onAcquired(ctx)
	m.met.onHeld(ctx, 1) // the -1 (end or Close) may come first; the sum is right once both are in
	if m.log.Enabled(ctx, slog.LevelDebug) {
		if kind == grantTakeover {
			var old string
			if g.displaced != nil {
				old = g.displaced.String()
			}
			m.log.Debug("lease taken over", "key", key.String(), "run_id", runID, "token", g.token, "displaced_run_id", old)
		} else {
			m.log.Debug("lease acquired", "key", key.String(), "run_id", runID, "token", g.token)
		}
	}
	return l, false, nil
}

// releaseOrphan releases the row of a run whose grant reply was lost, in
// the background, with ctx's values but not its cancellation (the caller's
// ctx may be gone already), bounded by CallTimeout; it gives up when the
// Manager closes. A failed release is left to the renewal mode
// (renewal.unconfirmed).
//
// The grant's outcome is unknown: its statement may still be running on
// the server when the release is sent on another connection, and commit
// after it. A per-lease row granted that late expires after one TTL; a
// heartbeat row (ep set) would be held for as long as the epoch lives. So
// while the release finds no row of the run (ReleaseNotFound, or another
// run's row: ReleaseNotHolder), it is sent again after CallTimeout, then
// 2 and 4 times that: a grant that commits later still than that stays
// held until the epoch ends (Close, or the heartbeat lost).
func (m *Manager) releaseOrphan(ctx context.Context, key Key, runID uuid.UUID, ep *epoch) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed.Load() {
		return
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		ctx := context.WithoutCancel(ctx)
		wait := m.cfg.CallTimeout
		for attempt := 0; ; attempt++ {
			res, err := m.releaseOrphanOnce(ctx, key, runID)
			if err != nil {
				m.log.Debug("orphan release failed", "key", key.String(), "run_id", runID, "err", err)
				m.ren.unconfirmed(key, runID, ep)
				return
			}
			m.log.Debug("orphan release", "key", key.String(), "run_id", runID, "result", res.String())
			if ep == nil || attempt == 3 || (res != ReleaseNotFound && res != ReleaseNotHolder) {
				return
			}
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-m.root.Done():
				t.Stop()
				return
			}
			wait *= 2
		}
	}()
}

// releaseOrphanOnce is one release statement of releaseOrphan, bounded by
// CallTimeout and ended by Close.
func (m *Manager) releaseOrphanOnce(ctx context.Context, key Key, runID uuid.UUID) (ReleaseResult, error) {
	ctx, cancel := m.call(ctx)
	defer cancel()
	defer m.whenClosed(cancel)()
	return m.release(ctx, key, runID)
}
