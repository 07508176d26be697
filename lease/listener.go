package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
//     displaced meanwhile (renewal.catchUp).

// signal is what a subscription is woken with.
type signal uint8

const (
	signalNotify    signal = iota + 1 // a notification for the key
	signalReconnect                   // the listener (re)connected: notifications may have been missed
	signalFallback                    // notifications are not delivered: re-read now (every FallbackPoll)
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

// pokeAll wakes every subscriber with sig.
func (f *fanout) pokeAll(sig signal) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, set := range f.subs {
		for s := range set {
			s.poke(sig)
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
		// A run whose grant's reply is still in flight ends as soon as the
		// grant registers it (leaseOrGrant).
		if l := m.leaseOrGrant(id, ErrTakenOver); l != nil && keyPayload(l.key) == key {
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
	if m.closed.Load() || m.listening.Load() {
		return
	}
	m.listening.Store(true)
	m.wg.Add(1)
	go m.listenLoop(m.root)
}

// firstListenDone records the end of the listener's first connection
// attempt: LISTEN in place, or the attempt failed.
func (m *Manager) firstListenDone() { m.firstListen.Do(func() { close(m.listenFirst) }) }

// awaitListener starts the listener and, until its first connection has
// LISTEN in place (or its first attempt failed), waits for that, bounded by
// CallTimeout, ctx and Close. A grant sent after it is then displaced only
// by a takeover that commits after LISTEN, whose notification the listener
// receives: the first leases of a new Manager are told of a takeover as
// soon as later ones, not when the listener connects. Later grants never
// wait (a reconnecting listener is covered by its sweep on connect, the
// heartbeat and the fallback poll).
func (m *Manager) awaitListener(ctx context.Context) {
	m.startListener()
	select {
	case <-m.listenFirst:
		return
	default:
	}
	t := time.NewTimer(m.cfg.CallTimeout)
	defer t.Stop()
	select {
	case <-m.listenFirst:
	case <-t.C:
	case <-ctx.Done():
	case <-m.root.Done():
	}
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
		m.lh.set(ListenerConnecting)
		connected, err := m.listenOnce(ctx)
		m.firstListenDone() // the first attempt failed: grants no longer wait for it
		m.fan.setReady(false)
		if ctx.Err() != nil {
			m.stopListenHealth()
			return
		}
		m.observe(event{kind: evListener})
		m.log.Warn("lease: listener disconnected; reconnecting", "err", err, "backoff", backoff)
		if connected {
			backoff = minBackoff
		}
		timer.Reset(backoff)
		select {
		case <-ctx.Done():
			m.stopListenHealth()
			return
		case <-timer.C:
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// stopListenHealth records the listener's end.
func (m *Manager) stopListenHealth() {
	if m.lh.set(ListenerStopped) {
		m.met.onListenerFallback(m.root, -1)
	}
}

// listenConfig is the LISTEN connection's configuration: ListenConnString's
// when set, else the pool's.
func (m *Manager) listenConfig() *pgx.ConnConfig {
	if m.cfg.listen != nil {
		return m.cfg.listen.Copy()
	}
	return m.pool.Config().ConnConfig
}

// listenOnce runs one LISTEN connection until it fails or the Manager
// closes.
//
// Delivery is verified, not assumed: right after LISTEN and then every
// WaitPoll the listener sends a probe NOTIFY from another session opened
// with the pool's settings — the path every release and takeover
// notification takes — on a channel only this connection listens on, and
// waits up to CallTimeout for it. A probe that
// comes back means notifications are delivered. One that does not, while
// the connection still answers a bounded SELECT 1, means they are not (a
// pooler in transaction mode hands LISTEN to a server connection other
// clients then use): the Manager logs that once, counts it and reports it
// in Health, and falls back to polling every FallbackPoll (fallbackPoll: a
// re-read by every waiter and watcher) until a probe comes back. A
// connection that does not answer is dropped and reconnected, which also
// detects a silent partition.
func (m *Manager) listenOnce(ctx context.Context) (connected bool, err error) {
	cctx, cancel := m.call(ctx)
	// A connection of its own, with the pool's settings (or
	// ListenConnString's): taking one out of the pool would shrink it and
	// drop that connection's prepared statements from the pool's use.
	conn, err := pgx.ConnectConfig(cctx, m.listenConfig())
	if err != nil {
		cancel()
		return false, fmt.Errorf("listen connection: %w", err)
	}
	defer func() {
		closeCtx, c := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = conn.Close(closeCtx)
		c()
	}()
	// The probe channel first and the shared channel last: the connection's
	// last statement then reads "LISTEN <shared channel>" in
	// pg_stat_activity.
	probeChannel := "fencekit_probe_" + randomHex(12)
	cancel()
	// Statements run on sctx: Close (ctx) does not interrupt one in flight
	// (Manager.background); each is bounded by CallTimeout.
	sctx := context.WithoutCancel(ctx)
	lctx, cancel := m.call(sctx)
	_, err = conn.Exec(lctx, "LISTEN "+pgx.Identifier{probeChannel}.Sanitize())
	if err == nil {
		_, err = conn.Exec(lctx, "LISTEN "+pgx.Identifier{m.st.channel}.Sanitize())
	}
	cancel()
	if err != nil {
		return false, fmt.Errorf("listen: %w", err)
	}
	m.fan.setReady(true)
	m.firstListenDone()
	m.observe(event{kind: evListener, up: true})
	m.lh.set(ListenerUnverified)
	m.ren.catchUp(sctx, conn)

	prober := &probeConn{m: m}
	defer func() {
		_ = prober.await() // the listener is ending: the outcome no longer matters
		prober.close(ctx)
	}()
	var (
		probe        string    // payload of the probe in flight, "" when none
		probeDue     time.Time // when to send the next probe
		probeExpires time.Time // when the probe in flight counts as lost
		fallbackDue  time.Time // next fallback poll while not delivering
	)
	probeDue = time.Now()
	for {
		now := time.Now()
		if probe == "" && !now.Before(probeDue) {
			// Sent on a goroutine of its own: this loop keeps reading
			// notifications while the probe's NOTIFY waits for its
			// commit (behind every other notifying commit, in a storm).
			probe = randomHex(8)
			probeExpires = now.Add(m.cfg.CallTimeout)
			probeDue = now.Add(m.cfg.WaitPoll)
			prober.start(sctx, probeChannel, probe)
		}
		next := probeDue
		if probe != "" {
			next = probeExpires
		}
		if m.lh.polling() && fallbackDue.Before(next) {
			next = fallbackDue
		}
		wctx, wcancel := context.WithDeadline(ctx, next)
		n, err := conn.WaitForNotification(wctx)
		wcancel()
		switch {
		case err == nil:
			if n.Channel == probeChannel {
				// Only this listener's probes use the channel: even one
				// that arrives after it was counted lost shows delivery.
				probe = ""
				// Its commit is done: the send's reply is at hand.
				_ = prober.await() // delivered: the send succeeded, whatever it reports
				m.probeDelivered()
				continue
			}
			m.onNotification(n.Payload)
			continue
		case ctx.Err() != nil:
			return true, ctx.Err()
		case !errors.Is(err, context.DeadlineExceeded) && !pgconn.Timeout(err):
			return true, err
		}
		now = time.Now()
		if probe != "" && !now.Before(probeExpires) {
			probe = ""
			// The send ends by its own deadline, about now.
			perr := prober.await()
			// Lost, not sent, or this connection is gone: tell which.
			if err := m.pingListen(sctx, conn); err != nil {
				return true, err
			}
			if perr != nil {
				// The database cannot be reached that way: nothing is
				// learned about delivery.
				m.log.Debug("lease: listener probe not sent", "err", perr)
			} else if m.probeLost() {
				fallbackDue = now
			}
		}
		if m.lh.polling() && !now.Before(fallbackDue) {
			fallbackDue = now.Add(m.cfg.FallbackPoll)
			m.fallbackPoll(sctx)
		}
	}
}

// probeConn sends the listener's probes on a connection of its own, opened
// with the pool's settings (so through the same pooler, if any, as every
// statement that notifies) but outside the pool: a probe never waits for,
// nor holds, a connection the Manager's statements need. It is opened on
// the first probe, reopened after a failure, and closed with the listener.
type probeConn struct {
	m      *Manager
	conn   *pgx.Conn  // used by the send in flight only
	result chan error // the outcome of the send in flight; nil when none
}

// start sends one probe on a goroutine of its own; the listener collects
// its outcome (await) before it starts another.
func (p *probeConn) start(ctx context.Context, channel, payload string) {
	res := make(chan error, 1)
	p.result = res
	go func() { res <- p.send(ctx, channel, payload) }()
}

// await waits for the send in flight, if any (bounded by CallTimeout), and
// returns its error.
func (p *probeConn) await() error {
	if p.result == nil {
		return nil
	}
	err := <-p.result
	p.result = nil
	return err
}

// send sends one probe NOTIFY, bounded by CallTimeout.
func (p *probeConn) send(ctx context.Context, channel, payload string) error {
	cctx, cancel := p.m.call(ctx)
	defer cancel()
	if p.conn == nil {
		c, err := pgx.ConnectConfig(cctx, p.m.pool.Config().ConnConfig)
		if err != nil {
			return fmt.Errorf("probe connection: %w", err)
		}
		p.conn = c
	}
	if _, err := p.conn.Exec(cctx, "SELECT pg_notify($1::text, $2::text)", channel, payload); err != nil {
		p.close(ctx)
		return err
	}
	return nil
}

func (p *probeConn) close(ctx context.Context) {
	if p.conn == nil {
		return
	}
	closeCtx, c := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	_ = p.conn.Close(closeCtx)
	c()
	p.conn = nil
}

// pingListen checks the LISTEN connection with a bounded SELECT 1.
func (m *Manager) pingListen(ctx context.Context, conn *pgx.Conn) error {
	pctx, pcancel := m.call(ctx)
	defer pcancel()
	if _, err := conn.Exec(pctx, "SELECT 1"); err != nil {
		return fmt.Errorf("listen connection health check: %w", err)
	}
	return nil
}

// probeDelivered records a probe that came back.
func (m *Manager) probeDelivered() {
	if m.lh.delivered() {
		m.met.onListenerFallback(m.root, -1)
		m.log.Info("lease: listener delivers notifications again; polling fallback off")
	}
}

// probeLost records a probe that did not come back on a connection that
// answers; true when that starts the polling fallback.
func (m *Manager) probeLost() bool {
	m.met.onProbeLost(m.root)
	if !m.lh.probeLost() {
		return false
	}
	m.met.onListenerFallback(m.root, 1)
	m.log.Warn("lease: the LISTEN connection does not receive notifications (a pooler in transaction mode?); "+
		"falling back to polling — set Config.ListenConnString to a direct or session-mode connection",
		"fallback_poll", m.cfg.FallbackPoll, "probe_wait", m.cfg.CallTimeout)
	return true
}

// fallbackPoll stands in for the notifications that are not delivered:
// every waiter and watcher re-reads its key. In heartbeat mode that is
// all: the heartbeat reads the displaced and revoked runs itself. In
// per-lease mode the displaced leases are ended too (renewal.fallback).
func (m *Manager) fallbackPoll(ctx context.Context) {
	m.ren.fallback(ctx)
	m.fan.pokeAll(signalFallback)
}

// randomHex returns 2n random hex characters.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
