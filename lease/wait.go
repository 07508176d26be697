package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

type waiter struct {
	payload string
	ch      chan wakeReason // 1-slot; wakeups merge
}

func (w *waiter) poke(r wakeReason) {
	select {
	case w.ch <- r:
	default:
	}
}

// AcquireWait blocks until it acquires the lease for key, ctx ends or the
// Manager closes. Between attempts it sleeps until the first of:
//
//   - a release NOTIFY for key (one LISTEN connection per Manager, started
//     on first use, shared by all waiters, reconnecting with backoff; after
//     every (re)connect all waiters retry, since notifications sent while it
//     was down are lost). A release wakes one waiter of the key per Manager,
//     not all of them; a woken waiter that leaves without the lease passes
//     the wakeup on;
//   - the holder's expiry, from the database's remaining time converted to a
//     local monotonic timer;
//   - the safety-net poll (Config.WaitPoll).
//
// The Authorizer runs before every attempt. Network errors are retried
// after a short pause; errors reported by the server (for instance a
// missing table), authorization refusals and invalid keys are returned.
// A cancelled ctx returns context.Cause(ctx).
func (m *Manager) AcquireWait(ctx context.Context, key Key) (got *Lease, err error) {
	if err := key.Validate(); err != nil {
		return nil, err
	}
	if m.isClosed() {
		return nil, ErrClosed
	}
	w, ready := m.subscribe(key) //nolint:contextcheck // the shared listener lives on the Manager's context, not a caller's
	// A release NOTIFY wakes one waiter of the key in this Manager (see
	// dispatch). If this waiter was that one and leaves without the lease,
	// it passes the wakeup on so the others do not sleep through the
	// release.
	notified := false
	defer func() {
		m.unsubscribe(w, got == nil && notified)
	}()

	// Attempt only once LISTEN is in place (bounded), so a release between
	// the attempt and the wait cannot go unnoticed.
	readyWait := time.NewTimer(m.cfg.CallTimeout)
	select {
	case <-ready:
	case <-readyWait.C:
		m.log.Warn("lease: release listener not ready; waiting by polling", "key", key.String())
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
		l, err := m.tryAcquire(ctx, key)
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
		case reason = <-w.ch:
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

// subscribe registers a waiter for key and starts the listener if needed.
// The returned channel is closed while the listener is connected.
func (m *Manager) subscribe(key Key) (*waiter, <-chan struct{}) {
	w := &waiter{payload: keyPayload(key), ch: make(chan wakeReason, 1)}
	m.lmu.Lock()
	defer m.lmu.Unlock()
	set := m.waiters[w.payload]
	if set == nil {
		set = make(map[*waiter]struct{})
		m.waiters[w.payload] = set
	}
	set[w] = struct{}{}
	if !m.lstarted {
		m.mu.Lock()
		closed := m.closed
		if !closed {
			m.wg.Add(1)
		}
		m.mu.Unlock()
		if !closed {
			m.lstarted = true
			go m.listenLoop()
		}
	}
	return w, m.lready
}

// unsubscribe removes w. If w leaves holding an unconsumed release wakeup
// (or passOn says it consumed one without getting the lease), another waiter
// of the key is woken in its place.
func (m *Manager) unsubscribe(w *waiter, passOn bool) {
	m.lmu.Lock()
	defer m.lmu.Unlock()
	select {
	case r := <-w.ch:
		passOn = passOn || r == wakeNotify
	default:
	}
	if set := m.waiters[w.payload]; set != nil {
		delete(set, w)
		if len(set) == 0 {
			delete(m.waiters, w.payload)
		}
	}
	if passOn {
		m.wakeOneLocked(w.payload)
	}
}

// dispatch handles a release NOTIFY: it wakes ONE waiter of the key in this
// Manager rather than all of them, since only one can win the lease and the
// rest would each spend a statement to learn that (a thundering herd:
// docs/performance.md measured 67 statements per acquisition with 64
// contenders in 4 Managers when every waiter was woken). The woken waiter
// either acquires (and its release wakes the next), loses to another
// Manager's waiter (whose release will notify again), or leaves and passes
// the wakeup on (unsubscribe).
func (m *Manager) dispatch(payload string) {
	m.lmu.Lock()
	defer m.lmu.Unlock()
	m.wakeOneLocked(payload)
}

// wakeOneLocked wakes one waiter of payload; map order spreads the choice.
// Caller holds m.lmu.
func (m *Manager) wakeOneLocked(payload string) {
	for w := range m.waiters[payload] {
		w.poke(wakeNotify)
		return
	}
}

func (m *Manager) setReady(up bool) {
	m.lmu.Lock()
	defer m.lmu.Unlock()
	select {
	case <-m.lready:
		if !up {
			m.lready = make(chan struct{})
		}
	default:
		if up {
			close(m.lready)
			for _, set := range m.waiters {
				for w := range set {
					w.poke(wakeReconnect)
				}
			}
		}
	}
}

// listenLoop keeps one LISTEN connection up until the Manager closes,
// reconnecting with exponential backoff (50ms to 5s).
func (m *Manager) listenLoop() {
	defer m.wg.Done()
	const minBackoff, maxBackoff = 50 * time.Millisecond, 5 * time.Second
	backoff := minBackoff
	timer := time.NewTimer(0)
	<-timer.C
	defer timer.Stop()
	for {
		connected, err := m.listenOnce()
		m.setReady(false)
		if m.root.Err() != nil {
			return
		}
		m.obs.listener(false, err)
		m.log.Warn("lease: release listener disconnected; reconnecting", "err", err, "backoff", backoff)
		if connected {
			backoff = minBackoff
		}
		timer.Reset(backoff)
		select {
		case <-m.root.Done():
			return
		case <-timer.C:
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// listenOnce runs one LISTEN connection until it fails or the Manager
// closes. While idle it checks the connection every WaitPoll with a bounded
// ping, so a silent partition is detected.
func (m *Manager) listenOnce() (connected bool, err error) {
	ctx := m.root
	cctx, cancel := m.call(ctx)
	pc, err := m.pool.Acquire(cctx)
	if err != nil {
		cancel()
		return false, fmt.Errorf("acquire listen connection: %w", err)
	}
	conn := pc.Hijack()
	defer func() {
		closeCtx, c := context.WithTimeout(context.Background(), time.Second)
		_ = conn.Close(closeCtx)
		c()
	}()
	_, err = conn.Exec(cctx, "LISTEN "+pgx.Identifier{m.st.channel}.Sanitize())
	cancel()
	if err != nil {
		return false, fmt.Errorf("listen: %w", err)
	}
	m.setReady(true)
	m.obs.listener(true, nil)
	for {
		wctx, wcancel := context.WithTimeout(ctx, m.cfg.WaitPoll)
		n, err := conn.WaitForNotification(wctx)
		wcancel()
		switch {
		case err == nil:
			m.dispatch(n.Payload)
			continue
		case ctx.Err() != nil:
			return true, ctx.Err()
		case !errors.Is(err, context.DeadlineExceeded) && !pgconn.Timeout(err):
			return true, err
		}
		pctx, pcancel := m.call(ctx)
		_, err = conn.Exec(pctx, "SELECT 1")
		pcancel()
		if err != nil {
			return true, fmt.Errorf("listen connection health check: %w", err)
		}
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
