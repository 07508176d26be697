package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/fencekit/fencekit/lease/internal/leasemetrics"
)

// Heartbeat mode (Config.Renewal = RenewalHeartbeat, the default).
//
// The Manager keeps one row of fencekit_managers per epoch (migration
// 0009) and every lease it grants names that epoch, with expires_at
// 'infinity': a lease row is live while the epoch is (liveSQL). The
// renewer sends ONE statement per RenewEvery (st.beat) however many leases
// the epoch holds; it also returns the runs of the epoch a takeover
// displaced or Revoke revoked since the previous beat, so each such lease
// ends with its cause even when the listener is down. Local trust is the
// epoch's, computed exactly as a per-lease renewal's (sent_at + TTL −
// SafetyMargin of the last successful beat) and enforced by ONE timer per
// epoch. A beat the database refuses (zero rows: the epoch expired or was
// taken away) ends every lease of the epoch (ErrLost, or ErrTakenOver for a
// displaced run); the trust timer ends them with ErrTrustExpired. An epoch
// never comes back: the next grant starts a new one (a new id).

// The listener's polling fallback (notifications not delivered) ends no
// lease in this mode: the heartbeat statement reads the epoch's displaced
// and revoked runs every RenewEvery, and the listener's notifications and
// its catch-up on (re)connect tell sooner.

// heartbeatRenewal is the renewal of a Manager in heartbeat mode.
type heartbeatRenewal struct {
	m *Manager

	// ep is the current epoch, nil before the first grant; mu serialises
	// the choice of the epoch a grant names (and its creation); beating is
	// the heartbeat statement in flight (beatMu), which concurrent callers
	// share.
	ep      atomic.Pointer[epoch]
	mu      sync.Mutex
	beatMu  sync.Mutex
	beating *beatCall

	// unrel holds the runs whose release is not confirmed (unreleased.go;
	// m.mu guards it), retried by releaseLoop, which unrelKick wakes.
	unrel     map[uuid.UUID]unreleased
	unrelKick chan struct{}
}

func newHeartbeatRenewal(m *Manager) *heartbeatRenewal {
	return &heartbeatRenewal{m: m, unrel: make(map[uuid.UUID]unreleased), unrelKick: make(chan struct{}, 1)}
}

func (h *heartbeatRenewal) start() {
	h.m.wg.Add(2)
	go h.releaseLoop()
	go h.heartbeatLoop()
}

func (h *heartbeatRenewal) grantEpoch(ctx context.Context) (*epoch, error) {
	return h.usableEpoch(ctx)
}

// grantGone reports whether ep's heartbeat is over: it beats ep now
// (unless it is already dead) and reports whether ep is dead after.
func (h *heartbeatRenewal) grantGone(ctx context.Context, ep *epoch) bool {
	if dead, _ := ep.isDead(); dead {
		return true
	}
	if err := h.beat(ctx, ep); err != nil {
		return false
	}
	dead, _ := ep.isDead()
	return dead
}

// attach: the lease has no timer of its own; it is trusted while its epoch
// is, and ends at once if the epoch ended meanwhile. endEpoch marks the
// epoch dead before it collects its leases under m.mu: either it finds
// this lease or this check sees it dead.
func (*heartbeatRenewal) attach(l *Lease, _, _ time.Time) error {
	l.ep.held.Add(1)
	if dead, cause := l.ep.isDead(); dead {
		return cause
	}
	return nil
}

func (*heartbeatRenewal) detach(l *Lease) { l.ep.held.Add(-1) }

// deadlines are the epoch's while the lease is held, then those it had
// when it ended (freeze).
func (*heartbeatRenewal) deadlines(l *Lease) (trust, expires time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.done {
		trust, expires, _ = l.ep.state()
		return trust, expires
	}
	return l.trust, l.expires
}

func (*heartbeatRenewal) failed(l *Lease) bool {
	_, _, failed := l.ep.state()
	return failed
}

// freeze: from now on the lease reports the epoch's last deadlines.
func (*heartbeatRenewal) freeze(l *Lease) {
	l.trust, l.expires, _ = l.ep.state()
}

func (h *heartbeatRenewal) renew(ctx context.Context, l *Lease) (Renewal, error) {
	return h.renewHeartbeatLease(ctx, l)
}

// unconfirmed hands the run to the release loop (unreleased.go).
func (h *heartbeatRenewal) unconfirmed(key Key, run uuid.UUID, ep *epoch) {
	h.keepReleasing(key, run, ep, 0)
}

// unparked hands the run to the release loop, to be parked again.
func (h *heartbeatRenewal) unparked(key Key, run uuid.UUID, ep *epoch, idle time.Duration) {
	h.keepReleasing(key, run, ep, idle)
}

// takeUnconfirmed hands over the runs whose release is not confirmed, for
// Close to release with the held ones (m.mu held).
func (h *heartbeatRenewal) takeUnconfirmed() []unreleased {
	runs := make([]unreleased, 0, len(h.unrel))
	for _, u := range h.unrel {
		runs = append(runs, u)
	}
	h.unrel = map[uuid.UUID]unreleased{}
	return runs
}

// catchUp asks by epoch, one statement whatever the number of leases.
func (h *heartbeatRenewal) catchUp(ctx context.Context, q querier) {
	if err := h.endEpochDisplaced(ctx, q); err != nil && h.m.root.Err() == nil {
		h.m.log.Warn("lease: checking for takeovers after the listener connected", "err", err)
	}
}

// fallback ends nothing: the next beat reads the displaced records.
func (*heartbeatRenewal) fallback(context.Context) {}

func (h *heartbeatRenewal) close(ctx context.Context) error { return h.closeEpoch(ctx) }

// beatCall is one heartbeat statement in flight, shared by every caller
// that asks for a beat meanwhile (beat).
type beatCall struct {
	ep   *epoch
	done chan struct{} // closed when the beat has been applied
	err  error         // its outcome, set before done is closed
}

// beat sends ep's heartbeat statement and applies it (beatOnce), or, when a
// beat of ep is in flight already, waits for that one: concurrent callers
// (Acquire, Renew, the background renewer) share one statement. The
// statement runs on the Manager's own context (background), in a goroutine
// of its own, never on a caller's: a caller whose ctx ends stops waiting
// (and gets ctx's error) while the beat goes on and is applied, so a
// cancelled call neither fails the epoch nor logs a failed renewal. After
// Close it returns ErrClosed without a statement.
func (h *heartbeatRenewal) beat(ctx context.Context, ep *epoch) error {
	m := h.m
	for {
		h.beatMu.Lock()
		c := h.beating
		if c == nil {
			c = &beatCall{ep: ep, done: make(chan struct{})}
			if !m.goBackground(func() { h.runBeat(c) }) { //nolint:contextcheck // the beat runs on the Manager's own context, never a caller's
				h.beatMu.Unlock()
				return ErrClosed
			}
			h.beating = c
		}
		h.beatMu.Unlock()
		select {
		case <-c.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if c.ep == ep {
			return c.err
		}
		// That beat was another (older) epoch's: now beat ep.
	}
}

// runBeat runs c's statement and publishes its outcome.
func (h *heartbeatRenewal) runBeat(c *beatCall) {
	m := h.m
	c.err = m.beatOnce(c.ep)
	h.beatMu.Lock()
	h.beating = nil
	h.beatMu.Unlock()
	close(c.done)
}

// goBackground runs f in a goroutine that Close waits for; false (f not
// run) once the Manager is closed.
func (m *Manager) goBackground(f func()) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed.Load() {
		return false
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		f()
	}()
	return true
}

// beatOnce sends one heartbeat statement for ep, on the Manager's own
// context (only beat calls it, so one runs at a time), and applies it: a
// renewal extends the epoch's trust; the runs it reports end with their
// cause; a refusal ends the epoch. A failing statement, or a reply it
// cannot read (a run id that does not parse), changes nothing (the trust
// timer still fires on time) and is returned.
func (m *Manager) beatOnce(ep *epoch) error {
	ctx := m.background()
	ep.mu.Lock()
	since := ep.dbNow.Add(-m.heartbeatOverlap())
	ep.mu.Unlock()
	n := int(ep.held.Load())
	ctx, sp := m.startHeartbeat(ctx, ep.id.String(), n)
	cctx, cancel := m.call(ctx)
	defer cancel()
	sentAt := time.Now()
	var (
		renewed        bool
		dbNow, exp     time.Time
		taken, revoked []uuid.UUID
		legacy         bool
	)
	rows, err := m.pool.Query(cctx, m.st.beat, ep.param, m.ttlMicros(), m.cfg.CallTimeout.Microseconds(), since)
	if err == nil {
		var parseErr error // the first run id that did not parse: the reply is not trusted
		for rows.Next() {
			var (
				t, e       *time.Time
				run, cause *string
			)
			if err = rows.Scan(&t, &e, &run, &cause); err != nil {
				break
			}
			switch {
			case t != nil && e != nil:
				renewed, dbNow, exp = true, *t, *e
			case run != nil:
				id, perr := uuid.Parse(*run)
				switch {
				case perr != nil:
					if parseErr == nil {
						parseErr = fmt.Errorf("run id %q from the database: %w", *run, perr)
					}
				case cause != nil && *cause == "revoked":
					revoked = append(revoked, id)
				default:
					taken = append(taken, id)
				}
			case cause != nil && *cause == legacyFlag:
				legacy = true
			}
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
		if err == nil {
			err = parseErr
		}
	}
	d := time.Since(sentAt)
	if err != nil {
		ep.mu.Lock()
		ep.failed = true
		ep.mu.Unlock()
		err = fmt.Errorf("lease: heartbeat: %w", classify(err))
		m.met.onRenew(ctx, d, err)
		m.observe(event{kind: evBatch, n: n, failed: true})
		sp.endBatch(0, 0, err)
		if m.root.Err() == nil {
			m.log.Warn("lease renewal failed; leases stay trusted until their deadlines", "heartbeat", ep.id, "leases", n, "err", err)
		}
		return err
	}
	if renewed {
		trust := sentAt.Add(m.cfg.TTL - m.cfg.SafetyMargin)
		ep.mu.Lock()
		ep.failed = false
		// A reply that comes back after the epoch's trust passed extends
		// nothing, even before the trust timer has run: the epoch may have
		// expired in the database meanwhile (a renewal that committed late).
		if !ep.dead && time.Now().Before(ep.trust) && trust.After(ep.trust) {
			ep.trust, ep.sentAt, ep.expires, ep.dbNow = trust, sentAt, exp, dbNow
			ep.timer.Reset(time.Until(trust))
		}
		ep.mu.Unlock()
		m.met.onRenew(ctx, d, nil)
	} else {
		m.met.onRenew(ctx, d, ErrLost)
	}
	lost := m.endRuns(ep, taken, ErrTakenOver) + m.endRuns(ep, revoked, ErrLost)
	if legacy {
		lost += m.endLegacyDisplaced(ctx, m.pool, ep)
	}
	if !renewed {
		lost += m.endEpoch(ep, ErrLost)
		m.log.Warn("lease heartbeat refused: every lease of this heartbeat is lost", "manager_id", ep.id, "leases", n)
	}
	m.observe(event{kind: evBatch, n: n})
	sp.endBatch(n-lost, lost, nil)
	return nil
}

// endRuns ends the leases of ep among runs with cause; it returns how many
// it ended.
func (m *Manager) endRuns(ep *epoch, runs []uuid.UUID, cause error) int {
	ended := 0
	for _, id := range runs {
		if l := m.leaseOrGrant(id, cause); l != nil && l.ep == ep && l.end(cause) {
			ended++
		}
	}
	return ended
}

// legacyFlag is the cause the heartbeat statement (and its catch-up) reports,
// in a row without a run, when the schema holds records of an earlier
// release's takeovers since its time (cause NULL, no epoch: they cannot be
// read by epoch).
const legacyFlag = "legacy"

// endLegacyDisplaced ends, with ErrTakenOver, the leases of ep that a
// takeover displaced, asking by run_id (one primary-key lookup per lease,
// MaxBatch per statement): the records an earlier release's takeovers
// write carry no epoch, so this is how a heartbeat finds its own among
// them without reading everyone's. It returns how many it ended; a failed
// statement is logged, and the next beat that sees such records asks again.
func (m *Manager) endLegacyDisplaced(ctx context.Context, q querier, ep *epoch) int {
	m.mu.Lock()
	held := make([]*Lease, 0, ep.held.Load())
	for _, l := range m.leases {
		if l.ep == ep {
			held = append(held, l)
		}
	}
	m.mu.Unlock()
	ended := 0
	for len(held) > 0 {
		n := min(len(held), MaxBatch)
		taken, err := m.displacedRuns(ctx, q, held[:n])
		if err != nil {
			if m.root.Err() == nil {
				m.log.Warn("lease: checking for takeovers by an earlier release", "heartbeat", ep.id, "err", err)
			}
			return ended
		}
		for _, l := range held[:n] {
			if taken[l.runID] && l.end(ErrTakenOver) {
				ended++
			}
		}
		held = held[n:]
	}
	return ended
}

// endEpoch marks ep dead and ends every lease of it with cause; it returns
// how many it ended. Leases registered after it marked the epoch dead end
// at registration (newLease).
func (m *Manager) endEpoch(ep *epoch, cause error) int {
	ep.mu.Lock()
	if ep.dead {
		ep.mu.Unlock()
		return 0
	}
	ep.dead, ep.cause = true, cause
	if ep.timer != nil {
		ep.timer.Stop()
	}
	failed := ep.failed
	ep.mu.Unlock()
	if !errors.Is(cause, ErrClosed) {
		mcause := leasemetrics.CauseRenewalRejected
		if errors.Is(cause, ErrTrustExpired) {
			mcause = leasemetrics.CauseTrustDeadline
			if failed {
				mcause = leasemetrics.CauseDatabaseError
			}
		}
		m.met.onHeartbeatLost(m.root, mcause)
	}
	m.mu.Lock()
	var ls []*Lease
	for _, l := range m.leases {
		if l.ep == ep {
			ls = append(ls, l)
		}
	}
	m.mu.Unlock()
	// Past lossLogLimit leases the per-lease records go to Debug: the
	// caller's one Warn for the heartbeat gives the count.
	logEach := len(ls) <= lossLogLimit
	ended := 0
	for _, l := range ls {
		if l.endLogged(cause, logEach) {
			ended++
		}
	}
	return ended
}

// lossLogLimit is the most leases a lost heartbeat logs one Warn record
// each for.
const lossLogLimit = 100

// onEpochTrust is the epoch's trust timer: every lease of the epoch ends
// with ErrTrustExpired unless a beat moved the deadline.
func (m *Manager) onEpochTrust(ep *epoch) {
	ep.mu.Lock()
	if ep.dead {
		ep.mu.Unlock()
		return
	}
	if d := time.Until(ep.trust); d > 0 {
		ep.timer.Reset(d)
		ep.mu.Unlock()
		return
	}
	ep.mu.Unlock()
	n := m.endEpoch(ep, ErrTrustExpired)
	m.log.Warn("lease heartbeat trust deadline passed: every lease of this heartbeat is lost", "manager_id", ep.id, "leases", n)
}

// heartbeatLoop is the renewer in heartbeat mode: it ticks every
// RenewEvery/4 and sends the current epoch's beat when it falls due before
// the next tick. A failed beat is retried on the next tick.
func (h *heartbeatRenewal) heartbeatLoop() {
	m := h.m
	defer m.wg.Done()
	tick := max(m.cfg.RenewEvery/4, time.Millisecond)
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for {
		select {
		case <-m.root.Done():
			return
		case <-ticker.C:
		}
		if h.beatIfDue(time.Now().Add(tick)) {
			m.lastRound.Store(time.Now().UnixNano())
		}
	}
}

// beatIfDue beats the current epoch if its next beat falls due by horizon;
// false when a beat statement failed.
func (h *heartbeatRenewal) beatIfDue(horizon time.Time) bool {
	m := h.m
	due := func(ep *epoch) bool {
		ep.mu.Lock()
		defer ep.mu.Unlock()
		return !ep.dead && !ep.sentAt.Add(m.cfg.RenewEvery).After(horizon)
	}
	ep := h.ep.Load()
	if ep == nil || !due(ep) {
		return true
	}
	return h.beat(m.background(), ep) == nil
}

// endEpochDisplaced ends the leases of the current epoch that a takeover
// displaced or Revoke revoked since its last beat (less the overlap):
// the listener's catch-up, one statement whatever the number of leases.
func (h *heartbeatRenewal) endEpochDisplaced(ctx context.Context, q querier) error {
	m := h.m
	ep := h.ep.Load()
	if ep == nil {
		return nil
	}
	ep.mu.Lock()
	since, dead := ep.dbNow.Add(-m.heartbeatOverlap()), ep.dead
	ep.mu.Unlock()
	if dead {
		return nil
	}
	cctx, cancel := m.call(ctx)
	defer cancel()
	rows, err := q.Query(cctx, m.st.epochDisplaced, ep.param, since)
	if err != nil {
		return err
	}
	var taken, revoked []uuid.UUID
	legacy := false
	for rows.Next() {
		var run, cause *string
		if err := rows.Scan(&run, &cause); err != nil {
			rows.Close()
			return err
		}
		if run == nil {
			legacy = legacy || (cause != nil && *cause == legacyFlag)
			continue
		}
		id, err := uuid.Parse(*run)
		if err != nil {
			rows.Close()
			return fmt.Errorf("run id %q from the database: %w", *run, err)
		}
		if cause != nil && *cause == "revoked" {
			revoked = append(revoked, id)
		} else {
			taken = append(taken, id)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	m.endRuns(ep, taken, ErrTakenOver)
	m.endRuns(ep, revoked, ErrLost)
	if legacy {
		m.endLegacyDisplaced(ctx, q, ep)
	}
	return nil
}

// renewHeartbeatLease is Renew for a lease of this Manager in heartbeat
// mode: a beat of its epoch now, or the one in flight (which extends every
// lease of the epoch; beat), then the single-row check that the run still holds its row.
func (h *heartbeatRenewal) renewHeartbeatLease(ctx context.Context, l *Lease) (Renewal, error) {
	m := h.m
	ep := l.ep
	err := error(nil)
	if dead, _ := ep.isDead(); !dead {
		err = h.beat(ctx, ep)
	}
	// A lease that ended meanwhile (this beat, or the background one, found
	// it taken over or revoked) reports its cause, even when ending it
	// cancelled the ctx this beat was sent with (the lease's own).
	if cause := l.Err(); cause != nil {
		if errors.Is(cause, ErrTakenOver) {
			return Renewal{}, errTakenOverRenew(l.key, l.runID)
		}
		return Renewal{}, fmt.Errorf("%w: %s run %s: its heartbeat ended (%w)", ErrLost, l.key, l.runID, cause)
	}
	if err != nil {
		return Renewal{}, err
	}
	r, err := m.renewOne(ctx, l.key, l.runID)
	if err != nil {
		if errors.Is(err, ErrLost) {
			l.lose(lossCause(err))
		}
		return Renewal{}, err
	}
	trust, exp, _ := ep.state()
	r.TrustDeadline, r.ExpiresAt = trust, exp
	return r, nil
}
