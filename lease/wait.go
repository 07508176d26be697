package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/fencekit/fencekit/internal/pgerr"
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
// The Authorizer runs before every attempt. Transient failures are retried
// with a backoff (50ms doubling to 1s, at most WaitPoll) until ctx ends:
// network errors and lost connections, the server shutting down or
// starting up (SQLSTATE 57P01, 57P02, 57P03, class 08), a read-only node
// during a switchover (25006), a database busy (ErrBusy), and grants the
// database refuses until the token floor is checked on a new node
// (ErrFailoverUnchecked) or the sequence is above the floor
// (ErrTokenFloor). Other errors reported by the server (for instance a
// missing table), authorization refusals and invalid keys are returned at
// once.
//
// When ctx ends, the error matches ctx.Err() and context.Cause(ctx), and
// also the last attempt's error when there was one (errors.Is ErrHeld with
// a *HeldError while the key was held; errors.As *FailoverError while the
// node was unchecked; the server's *pgconn.PgError; ...), so a caller that
// gives up can tell why. ctx's values go to the lease as with Acquire;
// opts apply to the grant (WithHolder).
func (m *Manager) AcquireWait(ctx context.Context, key Key, opts ...Option) (got *Lease, err error) {
	if err := key.Validate(); err != nil {
		return nil, err
	}
	o, err := grantOpts(opts)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	ctx, sp := m.startSpan(ctx, spanAcquireWait, key)
	defer func() { sp.endGrant(got, err) }()
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
	var last error // the last attempt's error, reported with ctx's when ctx ends
	backoff := time.Duration(0)
	for {
		if err := m.authorize(ctx, key); err != nil {
			return nil, err
		}
		l, err := m.grant(ctx, grantAcquire, key, o)
		if err == nil {
			return l, nil
		}
		notified = false
		if !errors.As(err, new(*HeldError)) {
			immediate = 0
		}
		if ctx.Err() == nil || last == nil {
			last = err
		}
		var held *HeldError
		if !transient(err) {
			backoff = 0
		}
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
			return nil, waitEnded(ctx, key, last)
		case transient(err):
			// A switchover, restart, lost connection or unchecked node:
			// retry with a backoff until ctx ends. Refusals are logged by
			// grantRefused (once per state change, then counts).
			backoff = min(max(2*backoff, 50*time.Millisecond), time.Second, m.cfg.WaitPoll)
			m.log.Debug("lease: acquire attempt failed while waiting; retrying", "key", key.String(), "err", err, "retry_in", backoff)
			expiry.Reset(backoff)
		case pgerr.Code(err) != "": // any other server error
			return nil, err
		default:
			// Any other client-side failure: retry soon, bounded by the poll.
			m.log.Debug("lease: acquire attempt failed while waiting", "key", key.String(), "err", err)
			expiry.Reset(min(m.cfg.WaitPoll, time.Second))
		}
		m.observe(event{kind: evWaiting, key: key})
		var reason wakeReason
		select {
		case sig := <-w.ch:
			switch sig {
			case signalReconnect:
				reason = wakeReconnect
			case signalFallback:
				reason = wakeFallback
			default:
				reason = wakeNotify
			}
		case <-expiry.C:
			reason = wakeExpiry
		case <-poll.C:
			reason = wakePoll
			poll.Reset(m.cfg.WaitPoll)
		case <-ctx.Done():
			return nil, waitEnded(ctx, key, last)
		case <-m.root.Done():
			return nil, ErrClosed
		}
		notified = reason == wakeNotify
		immediate = 0
		m.observe(event{kind: evWoken, key: key, wake: reason})
	}
}

// markContended flags the live holder's row so that its release sends a
// NOTIFY. gone reports that no live lease of that holder exists any more.
func (m *Manager) markContended(ctx context.Context, key Key, holder uuid.UUID) (gone bool, err error) {
	cctx, cancel := m.call(ctx)
	defer cancel()
	run := pgtype.UUID{Bytes: holder, Valid: holder != uuid.Nil} // NULL: any holder
	var ok bool
	err = m.pool.QueryRow(cctx, m.st.markContended, key.AccountID, key.SessionID, run).Scan(&ok)
	if errors.Is(err, pgx.ErrNoRows) {
		return true, nil
	}
	return false, err
}

// transient reports whether an acquire attempt's error is worth retrying
// until the caller's ctx ends: a grant refused until the floor check passes
// or the sequence is advanced, a server error of pgerr.Transient (read-only
// during a switchover, shutting down or starting up, class 08), or a failure without a server error (network, lost connection,
// timeout of the attempt).
func transient(err error) bool {
	if errors.Is(err, ErrFailoverUnchecked) || errors.Is(err, ErrTokenFloor) {
		return true
	}
	if pgerr.Code(err) != "" {
		return pgerr.Transient(err)
	}
	return !errors.Is(err, ErrHeld) && !errors.Is(err, ErrBusy) && !errors.Is(err, ErrClosed) &&
		!errors.Is(err, ErrUnauthorized) && !errors.Is(err, ErrInvalidKey)
}

// waitEnded is AcquireWait's error once ctx has ended: it matches ctx.Err(),
// context.Cause(ctx) and, when an attempt failed, that attempt's error.
func waitEnded(ctx context.Context, key Key, last error) error {
	cause := context.Cause(ctx)
	if last == nil {
		if errors.Is(cause, ctx.Err()) {
			return cause
		}
		return fmt.Errorf("%w: %w", ctx.Err(), cause)
	}
	if errors.Is(cause, ctx.Err()) {
		return fmt.Errorf("lease: acquire wait %s: %w (last attempt: %w)", key, cause, last)
	}
	return fmt.Errorf("lease: acquire wait %s: %w: %w (last attempt: %w)", key, ctx.Err(), cause, last)
}
