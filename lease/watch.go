package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease/internal/leaseopt"
)

// WatchKind is what a WatchEvent reports.
type WatchKind uint8

// Watch event kinds.
const (
	// WatchCurrent is the key's state as the database reported it just now.
	// It is the first event of every Watcher, and replaces the events a
	// Watcher missed by falling behind (Dropped is then true).
	WatchCurrent WatchKind = iota + 1
	// WatchGranted: a new grant (a larger token) by Acquire, AcquireWait or
	// Run, or a Takeover of a key that no live run held.
	WatchGranted
	// WatchTakenOver: a Takeover granted the key while another run still
	// held it; Displaced names that run.
	WatchTakenOver
	// WatchRenewed: the holder renewed (ExpiresAt moved forward), or its
	// grant was parked or resumed (Ownership.Parked changed: Lease.Park,
	// Manager.Resume; same run and token).
	WatchRenewed
	// WatchReleased: the holder released the key.
	WatchReleased
	// WatchExpired: the holder's lease expired on the database clock.
	WatchExpired
)

func (k WatchKind) String() string {
	switch k {
	case WatchCurrent:
		return "current"
	case WatchGranted:
		return "granted"
	case WatchTakenOver:
		return "taken-over"
	case WatchRenewed:
		return "renewed"
	case WatchReleased:
		return "released"
	case WatchExpired:
		return "expired"
	}
	return fmt.Sprintf("WatchKind(%d)", k)
}

// WatchEvent is one change of a watched key's ownership, with the state the
// database reported after it (Ownership: State, RunID, Token, Holder,
// ExpiresAt, Remaining at DBNow).
type WatchEvent struct {
	Kind WatchKind
	Ownership
	// Displaced is the run a takeover displaced (WatchTakenOver only).
	Displaced uuid.UUID
	// Dropped is set on a WatchCurrent that replaces events this Watcher
	// missed because it did not keep up.
	Dropped bool
}

// DefaultWatchPoll is the Watch safety-net poll interval when WithWatchPoll
// is not given (or WaitPoll, when that is shorter).
const DefaultWatchPoll = time.Second

// watchQueue is how many events a Watcher keeps unread before it falls
// behind: then they are replaced by one WatchCurrent.
const watchQueue = 16

type watchOptions struct{ poll time.Duration }

// ErrWatcherClosed is returned by Watcher.Next after Close or once the
// Watch ctx ended.
var ErrWatcherClosed = errors.New("lease: watcher closed")

// Watch reports the ownership changes of key, for clients that reconcile
// their UI with the server: the first event is WatchCurrent, then one event
// per change, in token order. The Authorizer runs first (a refusal returns
// an error matching ErrUnauthorized and registers nothing). The Watcher
// ends when ctx ends, when Close is called or when the Manager closes.
//
// All watchers of one key in one Manager share one database reader, driven
// by the Manager's single LISTEN connection: a takeover notifies at once, and
// so does a release once the key is flagged as contended (the reader flags
// each grant it sees held, as AcquireWait does; the flag then stays on the
// key). A grant of a free key sends no notification and an expiry sends
// none: the reader sets a timer at the holder's expiry (from the database's
// remaining time) and polls every WithWatchPoll (default DefaultWatchPoll,
// or WaitPoll when shorter), so each is reported within that interval. A
// reader that cannot reach the database retries at the poll interval and
// reports nothing meanwhile. After the listener reconnects the key is read
// again.
//
// A Watcher that does not call Next keeps at most a few events; past that
// they are replaced by one WatchCurrent (Dropped) that every later reading
// overwrites with the latest state until Next takes it, so a slow reader
// gets the current state, never a stale one presented as current, and never
// delays other watchers.
func (m *Manager) Watch(ctx context.Context, key Key, opts ...Option) (*Watcher, error) {
	if err := key.Validate(); err != nil {
		return nil, err
	}
	set, err := applyOptions(leaseopt.Watch, opts)
	if err != nil {
		return nil, err
	}
	if m.isClosed() {
		return nil, ErrClosed
	}
	if err := m.authorize(ctx, key); err != nil {
		return nil, err
	}
	o := watchOptions{poll: min(DefaultWatchPoll, m.cfg.WaitPoll)}
	if set.Poll > 0 {
		o.poll = set.Poll
	}
	w := &Watcher{wake: make(chan struct{}, 1), closed: make(chan struct{})}
	if err := m.watches.add(m, key, w, o); err != nil { //nolint:contextcheck // the shared reader runs on the Manager's context, not a watcher's
		return nil, err
	}
	w.stopCtx = context.AfterFunc(ctx, w.Close)
	return w, nil
}

// Watcher receives one key's ownership events (Manager.Watch). Next and
// Close are safe for concurrent use.
type Watcher struct {
	kw      *keyWatch
	wake    chan struct{} // 1 slot: events are queued
	closed  chan struct{}
	stopCtx func() bool

	mu      sync.Mutex
	queue   []WatchEvent
	initial bool // the first WatchCurrent was queued
	lagging bool // fell behind: the queue is one WatchCurrent, replaced by each reading
	done    bool
	err     error // why it ended
}

// Next returns the next event, blocking until there is one, ctx ends
// (context.Cause(ctx)), or the Watcher ends (ErrWatcherClosed, or ErrClosed
// when the Manager closed). Events queued before the end are returned first.
func (w *Watcher) Next(ctx context.Context) (WatchEvent, error) {
	for {
		w.mu.Lock()
		if len(w.queue) > 0 {
			e := w.queue[0]
			w.queue[0] = WatchEvent{}
			w.queue, w.lagging = w.queue[1:], false
			if len(w.queue) == 0 {
				w.queue = nil
			}
			w.mu.Unlock()
			return e, nil
		}
		if w.done {
			err := w.err
			w.mu.Unlock()
			return WatchEvent{}, err
		}
		w.mu.Unlock()
		select {
		case <-w.wake:
		case <-w.closed:
		case <-ctx.Done():
			return WatchEvent{}, context.Cause(ctx)
		}
	}
}

// Close ends the Watcher and unregisters it; the key's reader stops with its
// last watcher. Idempotent.
func (w *Watcher) Close() {
	if w.end(ErrWatcherClosed) && w.kw != nil {
		w.kw.remove(w)
	}
	if w.stopCtx != nil {
		w.stopCtx()
	}
}

// end marks the Watcher done with err; false if it already was.
func (w *Watcher) end(err error) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return false
	}
	w.done, w.err = true, err
	close(w.closed)
	return true
}

// push queues events; when they do not fit, the queue becomes one
// WatchCurrent of cur (the latest state).
func (w *Watcher) push(evs []WatchEvent, cur WatchEvent) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return
	}
	if !w.initial {
		w.initial = true
		w.queue = append(w.queue, cur)
	} else if w.lagging || len(w.queue)+len(evs) > watchQueue {
		// Behind: until it reads again, it holds only the latest state.
		w.lagging = true
		cur.Kind, cur.Dropped, cur.Displaced = WatchCurrent, true, uuid.Nil
		w.queue = append(w.queue[:0], cur)
	} else {
		w.queue = append(w.queue, evs...)
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// watches is the Manager's set of watched keys (the zero value is ready).
type watches struct {
	mu   sync.Mutex
	keys map[Key]*keyWatch
}

// keyWatch is the shared reader of one key: one goroutine reading the key's
// row on a notification, at the holder's expiry and at every poll, and
// handing each change to the key's watchers.
type keyWatch struct {
	m    *Manager
	key  Key
	poll time.Duration
	sub  *subscription
	kick chan struct{} // 1 slot: a new watcher wants its first event

	mu       sync.Mutex // guards watchers (under watches.mu when adding)
	watchers map[*Watcher]struct{}
	stop     chan struct{} // closed when the last watcher leaves
}

func (ws *watches) add(m *Manager, key Key, w *Watcher, o watchOptions) error {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	kw := ws.keys[key]
	if kw == nil {
		m.mu.Lock()
		if m.closed.Load() {
			m.mu.Unlock()
			return ErrClosed
		}
		m.wg.Add(1)
		m.mu.Unlock()
		kw = &keyWatch{m: m, key: key, poll: o.poll, kick: make(chan struct{}, 1),
			watchers: make(map[*Watcher]struct{}), stop: make(chan struct{})}
		kw.sub, _ = m.fan.subscribe(key, false)
		if ws.keys == nil {
			ws.keys = make(map[Key]*keyWatch)
		}
		ws.keys[key] = kw
		m.startListener()
		go kw.run()
	}
	kw.mu.Lock()
	kw.watchers[w] = struct{}{}
	w.kw = kw
	kw.mu.Unlock()
	select {
	case kw.kick <- struct{}{}:
	default:
	}
	return nil
}

// remove unregisters w; the last watcher stops the reader.
func (kw *keyWatch) remove(w *Watcher) {
	ws := &kw.m.watches
	ws.mu.Lock()
	defer ws.mu.Unlock()
	kw.mu.Lock()
	delete(kw.watchers, w)
	last := len(kw.watchers) == 0
	kw.mu.Unlock()
	if last && ws.keys[kw.key] == kw {
		delete(ws.keys, kw.key)
		close(kw.stop)
	}
}

// run is the reader's loop.
func (kw *keyWatch) run() {
	m := kw.m
	defer m.wg.Done()
	defer m.fan.unsubscribe(kw.sub, false)
	poll := time.NewTicker(kw.poll)
	defer poll.Stop()
	expiry := time.NewTimer(time.Hour)
	expiry.Stop()
	defer expiry.Stop()
	var (
		prev    Ownership
		have    bool
		flagged fence.Token // the last grant flagged contended
	)
	for {
		select {
		case <-kw.sub.ch:
		case <-kw.kick:
		case <-expiry.C:
		case <-poll.C:
		case <-kw.stop:
			return
		case <-m.root.Done():
			kw.closeAll(ErrClosed)
			return
		}
		cur, displaced, err := kw.read()
		if err != nil {
			if m.root.Err() == nil {
				m.log.Debug("lease: watch read failed; retrying at the poll", "key", kw.key.String(), "err", err)
			}
			continue
		}
		if have && cur.Token < prev.Token {
			// Never present an older grant as current (a stale replica
			// or restore); wait for the database to catch up.
			continue
		}
		var evs []WatchEvent
		if have {
			evs = changes(prev, cur, displaced)
		}
		prev, have = cur, true
		kw.publish(evs, WatchEvent{Kind: WatchCurrent, Ownership: cur})
		if cur.Held() {
			expiry.Reset(cur.Remaining + time.Millisecond)
			if flagged != cur.Token {
				// Ask this grant's release to NOTIFY (migration 0003).
				if _, err := m.markContended(m.background(), kw.key, cur.RunID); err == nil {
					flagged = cur.Token
				}
			}
		}
	}
}

// publish hands evs (and the current state, for new or lagging watchers) to
// every watcher without blocking.
func (kw *keyWatch) publish(evs []WatchEvent, cur WatchEvent) {
	kw.mu.Lock()
	ws := make([]*Watcher, 0, len(kw.watchers))
	for w := range kw.watchers {
		ws = append(ws, w)
	}
	kw.mu.Unlock()
	for _, w := range ws {
		w.push(evs, cur)
	}
}

func (kw *keyWatch) closeAll(err error) {
	ws := &kw.m.watches
	ws.mu.Lock()
	if ws.keys[kw.key] == kw {
		delete(ws.keys, kw.key)
	}
	ws.mu.Unlock()
	kw.mu.Lock()
	defer kw.mu.Unlock()
	for w := range kw.watchers {
		w.end(err)
	}
}

// changes derives the events between two successive readings of a key.
func changes(prev, cur Ownership, displaced uuid.UUID) []WatchEvent {
	var evs []WatchEvent
	end := func(o Ownership) {
		switch o.State {
		case StateReleased:
			evs = append(evs, WatchEvent{Kind: WatchReleased, Ownership: o})
		case StateExpired:
			evs = append(evs, WatchEvent{Kind: WatchExpired, Ownership: o})
		}
	}
	switch {
	case cur.Token > prev.Token:
		// A new grant. Report it held even if it has ended since, then its end.
		g := cur
		if g.State != StateHeld {
			g.State, g.Remaining, g.ReleasedAt = StateHeld, max(g.ExpiresAt.Sub(g.DBNow), 0), time.Time{}
		}
		if prev.Held() && displaced == prev.RunID && displaced != uuid.Nil {
			evs = append(evs, WatchEvent{Kind: WatchTakenOver, Ownership: g, Displaced: displaced})
		} else {
			// If the previous grant ended unseen (between two readings), its
			// end is implied by this grant and not reported on its own.
			evs = append(evs, WatchEvent{Kind: WatchGranted, Ownership: g})
		}
		end(cur)
	case cur.Token == prev.Token && prev.Held():
		switch {
		case !cur.Held():
			end(cur)
		case cur.ExpiresAt.After(prev.ExpiresAt), cur.Parked != prev.Parked:
			// A park or resume keeps the grant (same token): reported as
			// a renewal with Parked telling which, never as a release.
			evs = append(evs, WatchEvent{Kind: WatchRenewed, Ownership: cur})
		}
	}
	return evs
}

// read is Inspect plus the run a takeover displaced (migration 0005).
func (kw *keyWatch) read() (Ownership, uuid.UUID, error) {
	m := kw.m
	cctx, cancel := m.call(m.background())
	defer cancel()
	var (
		rid, disp          *uuid.UUID
		token              *int64
		acq, ren, exp, rel *time.Time
		now                time.Time
		holder             *string
		parked             bool
	)
	if err := m.pool.QueryRow(cctx, watchStatement(m.cfg.qSchema), kw.key.AccountID, kw.key.SessionID).
		Scan(&rid, &token, &acq, &ren, &exp, &rel, &now, &holder, &parked, &disp); err != nil {
		return Ownership{}, uuid.Nil, fmt.Errorf("lease: watch %s: %w", kw.key, err)
	}
	st := Ownership{Key: kw.key, DBNow: now}
	if rid == nil {
		return st, uuid.Nil, nil
	}
	st.RunID, st.Token, st.AcquiredAt, st.RenewedAt, st.ExpiresAt = *rid, fence.Token(*token), *acq, *ren, *exp
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
	var d uuid.UUID
	if disp != nil {
		d = *disp
	}
	return st, d, nil
}

// watchStatement reads a key's row for Watch: Inspect's columns (a
// heartbeat row reports its heartbeat's expiry, so an expired heartbeat is
// reported as WatchExpired and each heartbeat as WatchRenewed) and
// displaced_run_id. $1 account, $2 session.
func watchStatement(qSchema string) string {
	return strings.ReplaceAll(`SELECT `+readColumns+`, l.displaced_run_id
  FROM (SELECT clock_timestamp() AS t) n
  LEFT JOIN $S.fencekit_leases l ON l.account_id = $1::text AND l.session_id = $2::text
  LEFT JOIN $S.fencekit_managers hb ON hb.manager_id = l.manager_id AND l.expires_at = 'infinity'`, "$S", qSchema)
}
