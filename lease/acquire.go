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
	"github.com/fencekit/fencekit/lease/leasemetrics"
)

// Acquire takes the lease for key if it is free (never acquired, released or
// expired on the database clock), in one statement. Before that, the
// Authorizer runs; a refusal returns an error matching ErrUnauthorized and
// sends nothing. A held lease returns a *HeldError (matching ErrHeld). The
// returned Lease is renewed in the background until it is released, lost,
// or the Manager is closed.
//
// ctx bounds the call only. The lease's Context keeps ctx's values (user
// id, trace span, logger) but not its cancellation or deadline
// (context.WithoutCancel): the lease lives until it is released or lost.
// Use Run to tie the work to a caller's ctx. WithHolder labels the grant.
//
// A grant refused by the token floor or node gate (ErrFailoverUnchecked
// after a failover, switchover or restore; ErrTokenFloor) is followed,
// when Config.Floor names a source, by the Manager's own floor check and
// one more acquire statement: the call grants if the check passed. A
// failed check returns the refusal also matching ErrFloorCheck.
func (m *Manager) Acquire(ctx context.Context, key Key, opts ...Option) (l *Lease, err error) {
	ctx, sp := m.startSpan(ctx, spanAcquire, key)
	defer func() { sp.endGrant(l, err) }()
	if err := key.Validate(); err != nil {
		return nil, err
	}
	o, err := grantOpts(opts)
	if err != nil {
		return nil, err
	}
	if m.isClosed() {
		return nil, ErrClosed
	}
	if err := m.authorize(ctx, key); err != nil {
		return nil, err
	}
	return m.tryAcquire(ctx, key, o)
}

// tryAcquire runs one acquire statement and records its round trip.
func (m *Manager) tryAcquire(ctx context.Context, key Key, o grantOptions) (*Lease, error) {
	start := time.Now()
	l, err := m.acquireOnce(ctx, key, o)
	if err != nil && m.floorCheckAfter(ctx, &err) { // refused on an unchecked node: checked now
		l, err = m.acquireOnce(ctx, key, o)
	}
	m.met.onAcquireDone(ctx, time.Since(start), err)
	return l, err
}

func (m *Manager) acquireOnce(ctx context.Context, key Key, o grantOptions) (*Lease, error) {
	for attempt := 0; ; attempt++ {
		l, retry, err := m.acquireAttempt(ctx, key, o)
		if !retry || attempt > 0 {
			return l, err
		}
	}
}

// acquireAttempt runs one acquire statement. retry is true when the
// statement granted nothing because the Manager's heartbeat epoch had
// ended in the database (taken away): a fresh epoch may grant at once.
func (m *Manager) acquireAttempt(ctx context.Context, key Key, o grantOptions) (_ *Lease, retry bool, _ error) {
	runID, err := uuid.NewRandom()
	if err != nil {
		return nil, false, fmt.Errorf("lease: new run_id: %w", err)
	}
	ep, err := m.ren.grantEpoch(ctx)
	if err != nil {
		m.met.onRefused(ctx, leasemetrics.ReasonError)
		return nil, false, fmt.Errorf("lease: acquire %s: %w", key, err)
	}
	m.awaitListener(ctx)
	m.beginGrant(runID)
	defer m.endGrant(runID)
	sentAt := time.Now() // before the request leaves (or queues): the trust window starts here
	g, sent, left := m.grants.do(ctx, grantReq{key: key, run: runID, holder: nullable(o.holder), ep: ep})
	token, expires, err := g.token, g.expires, g.err // expires: NULL for a heartbeat row (the epoch's expiry)
	if !sent || left {
		err = ctx.Err() // ctx ended while the grant was queued, or in a shared statement
	}
	switch {
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
		if sent && !left {
			m.releaseOrphan(ctx, key, runID, ep)
		}
		m.observe(event{kind: evAcquireFailed, key: key})
		m.met.onRefused(ctx, leasemetrics.ReasonError)
		m.log.Debug("lease acquire failed", "key", key.String(), "err", err)
		return nil, false, fmt.Errorf("lease: acquire %s: %w", key, classify(err))
	}
	var exp time.Time
	if expires.Valid {
		exp = expires.Time
	}
	l := m.newLease(ctx, key, runID, fence.Token(token), o.holder, exp, sentAt, ep)
	if l == nil { // closed while acquiring
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.CallTimeout)
		defer rcancel()
		_, _ = m.release(rctx, key, runID)
		return nil, false, ErrClosed
	}
	m.refusals.checked(m)
	m.met.onAcquired(ctx)
	m.met.onHeld(ctx, 1) // the -1 (end or Close) may come first; the sum is right once both are in
	if m.log.Enabled(ctx, slog.LevelDebug) {
		m.log.Debug("lease acquired", "key", key.String(), "run_id", runID, "token", token)
	}
	return l, false, nil
}

// releaseOrphan releases the row of a run whose acquire reply was lost, in
// the background, with ctx's values but not its cancellation (the caller's
// ctx may be gone already), bounded by CallTimeout; it gives up when the
// Manager closes. A failed release is left to the renewal mode
// (renewal.unconfirmed).
func (m *Manager) releaseOrphan(ctx context.Context, key Key, runID uuid.UUID, ep *epoch) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed.Load() {
		return
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		ctx, cancel := m.call(context.WithoutCancel(ctx))
		defer cancel()
		defer m.whenClosed(cancel)()
		if res, err := m.release(ctx, key, runID); err != nil {
			m.log.Debug("orphan release failed", "key", key.String(), "run_id", runID, "err", err)
			m.ren.unconfirmed(key, runID, ep)
		} else {
			m.log.Debug("orphan release", "key", key.String(), "run_id", runID, "result", res.String())
		}
	}()
}
