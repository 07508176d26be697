package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The listener is one LISTEN connection per Manager, started by its first
// grant or waiter and stopped by Close, on the schema's channel
// (channelName). Statements notify it with the key's
// payload (keyPayload): a release of a contended key sends "<key>", a
// takeover that displaced a live holder sends "<key>:taken:<old run_id>".
//
// Its notifications are dispatched by a small fan-out that every consumer
// shares, so one connection serves them all however many there are:
//
//   - waiters (AcquireWait) and watchers subscribe by key payload and get a
//     1-slot channel. Signals coalesce: while one is pending, later ones are
//     dropped (a consumer re-reads the key's state when woken, so one pending
//     signal says all it needs). A release wakes ONE waiter of the key per
//     Manager (only one can win; see dispatch) but every watcher; a takeover
//     wakes every watcher and no waiter (the key is still held).
//   - holders do not subscribe (that would cost an allocation per grant): a
//     takeover notification ends the displaced run's Lease, found by run_id
//     among the Manager's leases, with ErrTakenOver.
//   - after every (re)connect all subscribers get signalReconnect, since
//     notifications sent while the connection was down are lost, and the
//     Manager asks the database once which of its leases a takeover
//     displaced meanwhile (endDisplaced).

// signal is what a subscription is woken with.
type signal uint8

const (
	signalNotify    signal = iota + 1 // a notification for the key
	signalReconnect                   // the listener (re)connected: notifications may have been missed
)

// subscription is one consumer of a key's notifications.
type subscription struct {
	payload string
	ch      chan signal // 1 slot; signals coalesce
	one     bool        // a waiter: a release wakes one waiter per key, not all
}

func (s *subscription) poke(sig signal) {
	select {
	case s.ch <- sig:
	default:
	}
}

// fanout routes the listener's notifications to subscriptions by key payload.
type fanout struct {
	mu    sync.Mutex
	subs  map[string]map[*subscription]struct{}
	ready chan struct{} // closed while the LISTEN connection is up
}

func newFanout() *fanout {
	return &fanout{subs: make(map[string]map[*subscription]struct{}), ready: make(chan struct{})}
}

// subscribe registers a consumer of key's notifications; one marks a waiter.
// The returned channel is closed while the listener is connected.
func (f *fanout) subscribe(key Key, one bool) (*subscription, <-chan struct{}) {
	s := &subscription{payload: keyPayload(key), ch: make(chan signal, 1), one: one}
	f.mu.Lock()
	defer f.mu.Unlock()
	set := f.subs[s.payload]
	if set == nil {
		set = make(map[*subscription]struct{})
		f.subs[s.payload] = set
	}
	set[s] = struct{}{}
	return s, f.ready
}

// unsubscribe removes s. A waiter that leaves holding an unconsumed release
// wakeup (or, passOn, one it consumed without getting the lease) wakes
// another waiter of the key in its place.
func (f *fanout) unsubscribe(s *subscription, passOn bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case sig := <-s.ch:
		passOn = passOn || sig == signalNotify
	default:
	}
	if set := f.subs[s.payload]; set != nil {
		delete(set, s)
		if len(set) == 0 {
			delete(f.subs, s.payload)
		}
	}
	if passOn && s.one {
		f.wakeOneLocked(s.payload)
	}
}

// dispatch delivers one notification for payload. A release wakes ONE
// waiter of the key in this Manager rather than all of them, since only one
// can win the lease and the rest would each spend a statement to learn that
// (a thundering herd). The woken waiter either acquires (and its release
// wakes the next), loses to another Manager's waiter (whose release will
// notify again), or leaves and passes the wakeup on (unsubscribe). Watchers
// get every notification.
func (f *fanout) dispatch(payload string, release bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	woke := !release
	for s := range f.subs[payload] {
		switch {
		case !s.one:
			s.poke(signalNotify)
		case !woke:
			s.poke(signalNotify)
			woke = true
		}
	}
}

// wakeOneLocked wakes one waiter of payload; map order spreads the choice.
func (f *fanout) wakeOneLocked(payload string) {
	for s := range f.subs[payload] {
		if s.one {
			s.poke(signalNotify)
			return
		}
	}
}

// setReady records the listener's state; on connect every subscriber is
// poked, since notifications sent while it was down are lost.
func (f *fanout) setReady(up bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.ready:
		if !up {
			f.ready = make(chan struct{})
		}
	default:
		if up {
			close(f.ready)
			for _, set := range f.subs {
				for s := range set {
					s.poke(signalReconnect)
				}
			}
		}
	}
}

// takenOverPrefix separates a takeover notification's key payload from the
// displaced run_id.
const takenOverPrefix = ":taken:"

// onNotification handles one NOTIFY of the Manager's channel.
func (m *Manager) onNotification(payload string) {
	key, run, taken := strings.Cut(payload, takenOverPrefix)
	if !taken {
		m.fan.dispatch(payload, true)
		return
	}
	if id, err := uuid.Parse(run); err == nil {
		m.mu.Lock()
		l := m.leases[id]
		m.mu.Unlock()
		if l != nil && keyPayload(l.key) == key {
			l.end(ErrTakenOver)
		}
	}
	m.fan.dispatch(key, false)
}

// startListener starts the listener once, unless the Manager is closed.
func (m *Manager) startListener() {
	if m.listening.Load() {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || m.listening.Load() {
		return
	}
	m.listening.Store(true)
	m.wg.Add(1)
	go m.listenLoop(m.root)
}

// listenLoop keeps one LISTEN connection up until ctx (the Manager's root,
// cancelled by Close) ends, reconnecting with exponential backoff (50ms to
// 5s).
func (m *Manager) listenLoop(ctx context.Context) {
	defer m.wg.Done()
	const minBackoff, maxBackoff = 50 * time.Millisecond, 5 * time.Second
	backoff := minBackoff
	timer := time.NewTimer(0)
	<-timer.C
	defer timer.Stop()
	for {
		connected, err := m.listenOnce(ctx)
		m.fan.setReady(false)
		if ctx.Err() != nil {
			return
		}
		m.obs.listener(false, err)
		m.log.Warn("lease: listener disconnected; reconnecting", "err", err, "backoff", backoff)
		if connected {
			backoff = minBackoff
		}
		timer.Reset(backoff)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// listenOnce runs one LISTEN connection until it fails or the Manager
// closes. While idle it checks the connection every WaitPoll with a bounded
// ping, so a silent partition is detected.
func (m *Manager) listenOnce(ctx context.Context) (connected bool, err error) {
	cctx, cancel := m.call(ctx)
	// A connection of its own, with the pool's settings: taking one out of
	// the pool would shrink it and drop that connection's prepared
	// statements from the pool's use.
	conn, err := pgx.ConnectConfig(cctx, m.pool.Config().ConnConfig)
	if err != nil {
		cancel()
		return false, fmt.Errorf("listen connection: %w", err)
	}
	defer func() {
		closeCtx, c := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = conn.Close(closeCtx)
		c()
	}()
	_, err = conn.Exec(cctx, "LISTEN "+pgx.Identifier{m.st.channel}.Sanitize())
	cancel()
	if err != nil {
		return false, fmt.Errorf("listen: %w", err)
	}
	m.fan.setReady(true)
	m.obs.listener(true, nil)
	m.endDisplaced(ctx, conn)
	for {
		wctx, wcancel := context.WithTimeout(ctx, m.cfg.WaitPoll)
		n, err := conn.WaitForNotification(wctx)
		wcancel()
		switch {
		case err == nil:
			m.onNotification(n.Payload)
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
