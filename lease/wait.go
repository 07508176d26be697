package lease

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// AcquireWait blocks until it acquires the lease for key, ctx ends or the
// Manager closes. Between attempts it sleeps until the first of:
//
//   - a release NOTIFY for key (through the Manager's LISTEN connection,
//     reconnecting with backoff; after every (re)connect all waiters retry,
//     since notifications sent while it was down are lost). A release wakes
//     one waiter of the key per Manager, not all of them; a woken waiter that
//     leaves without the lease passes the wakeup on;
//   - the holder's expiry, from the database's remaining time converted to a
//     local monotonic timer;
//   - the safety-net poll (Config.WaitPoll).
//
// The Authorizer runs before every attempt. Network errors are retried
// after a short pause; errors reported by the server (for instance a
// missing table), authorization refusals and invalid keys are returned.
// A cancelled ctx returns context.Cause(ctx). ctx's values go to the lease
// as with Acquire; opts apply to the grant (WithHolder).
func (m *Manager) AcquireWait(ctx context.Context, key Key, opts ...Option) (got *Lease, err error) {
	if err := key.Validate(); err != nil {
		return nil, err
	}
	o, err := grantOpts(opts)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	defer func() { m.met.onWaitDone(ctx, time.Since(start), err) }()
	if m.isClosed() {
		return nil, ErrClosed
	}
	w, ready := m.fan.subscribe(key, true)
	m.startListener()
	// A release NOTIFY wakes one waiter of the key in this Manager (see
	// fanout.dispatch). If this waiter was that one and leaves without the lease,
	// it passes the wakeup on so the others do not sleep through the
	// release.
	notified := false
	defer func() {
		m.fan.unsubscribe(w, got == nil && notified)
	}()

	// Attempt only once LISTEN is in place (bounded), so a release between
	// the attempt and the wait cannot go unnoticed.
	readyWait := time.NewTimer(m.cfg.CallTimeout)
	select {
	case <-ready:
	case <-readyWait.C:
		m.log.Warn("lease: listener not ready; waiting by polling", "key", key.String())
	case <-ctx.Done():
		readyWait.Stop()
		return nil, context.Cause(ctx)
	case <-m.root.Done():
		readyWait.Stop()
		return nil, ErrClosed
	}
	readyWait.Stop()

	poll := time.NewTimer(m.cfg.WaitPoll)
	defer poll.Stop()
	immediate := 0 // consecutive retries without sleeping (holder gone)
	expiry := time.NewTimer(time.Hour)
	expiry.Stop()
	defer expiry.Stop()
	for {
		if err := m.authorize(ctx, key); err != nil {
			return nil, err
		}
		l, err := m.tryAcquire(ctx, key, o)
		if err == nil {
			return l, nil
		}
		notified = false
		if !errors.As(err, new(*HeldError)) {
			immediate = 0
		}
		var held *HeldError
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &held):
			// Ask the holder's release to NOTIFY (releases of uncontended
			// leases send none). If the holder is already gone, retry now.
			// A row already flagged (the flag is sticky) needs no statement.
			if !held.contended {
				gone, merr := m.markContended(ctx, key, held.RunID)
				if merr == nil && gone && immediate < 3 {
					immediate++
					continue
				}
				if merr != nil {
					m.log.Debug("lease: marking lease contended failed; relying on expiry and poll", "key", key.String(), "err", merr)
					expiry.Reset(min(m.cfg.WaitPoll, time.Second))
					break
				}
			}
			if held.Remaining > 0 {
				expiry.Reset(held.Remaining + time.Millisecond)
			}
		case errors.Is(err, ErrClosed):
			return nil, err
		case errors.Is(err, ErrBusy):
			// Aborted for concurrency (serialization failure, deadlock,
			// lock timeout): retry soon, bounded by the poll.
			m.log.Debug("lease: acquire attempt aborted for concurrency while waiting; retrying", "key", key.String(), "err", err)
			expiry.Reset(min(m.cfg.WaitPoll, 50*time.Millisecond))
		case ctx.Err() != nil:
			return nil, context.Cause(ctx)
		case errors.As(err, &pgErr):
			return nil, err
		default:
			// Network trouble: retry soon, bounded by the poll.
			m.log.Debug("lease: acquire attempt failed while waiting", "key", key.String(), "err", err)
			expiry.Reset(min(m.cfg.WaitPoll, time.Second))
		}
		m.obs.waiting(key)
		var reason wakeReason
		select {
		case sig := <-w.ch:
			reason = wakeNotify
			if sig == signalReconnect {
				reason = wakeReconnect
			}
		case <-expiry.C:
			reason = wakeExpiry
		case <-poll.C:
			reason = wakePoll
			poll.Reset(m.cfg.WaitPoll)
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-m.root.Done():
			return nil, ErrClosed
		}
		notified = reason == wakeNotify
		immediate = 0
		m.obs.woken(key, reason)
	}
}

// markContended flags the live holder's row so that its release sends a
// NOTIFY. gone reports that no live lease of that holder exists any more.
func (m *Manager) markContended(ctx context.Context, key Key, holder uuid.UUID) (gone bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
	defer cancel()
	var run *uuid.UUID
	if holder != uuid.Nil {
		run = &holder
	}
	var ok bool
	err = m.pool.QueryRow(cctx, m.st.markContended, key.AccountID, key.SessionID, run).Scan(&ok)
	if errors.Is(err, pgx.ErrNoRows) {
		return true, nil
	}
	return false, err
}
