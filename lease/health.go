package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencekit/fencekit/sql/migrations"
)

// ListenerState is the state of a Manager's LISTEN connection, as Health
// reports it.
type ListenerState uint8

const (
	// ListenerIdle means not started yet (no grant, waiter or watch so far).
	ListenerIdle ListenerState = iota
	// ListenerConnecting means connecting, or reconnecting after a failure.
	ListenerConnecting
	// ListenerUnverified means listening; the first probe has not come back yet.
	ListenerUnverified
	// ListenerDelivering means the last probe came back, so notifications sent
	// by other sessions reach the Manager.
	ListenerDelivering
	// ListenerNotDelivering means a probe did not come back although the
	// connection answered (a pooler in transaction mode). The Manager polls
	// every FallbackPoll instead, until a probe comes back.
	ListenerNotDelivering
	// ListenerStopped means the Manager is closed.
	ListenerStopped
)

func (s ListenerState) String() string {
	switch s {
	case ListenerIdle:
		return "idle"
	case ListenerConnecting:
		return "connecting"
	case ListenerUnverified:
		return "unverified"
	case ListenerDelivering:
		return "delivering"
	case ListenerNotDelivering:
		return "not-delivering"
	case ListenerStopped:
		return "stopped"
	}
	return fmt.Sprintf("ListenerState(%d)", s)
}

// Health is a Manager's view of its own health (Manager.Health).
type Health struct {
	// Listener is the LISTEN connection's state, since ListenerSince.
	Listener      ListenerState
	ListenerSince time.Time
	// ListenerDedicated reports that Config.ListenConnString is set.
	ListenerDedicated bool
	// LastDelivered is when a probe last came back (zero: never).
	LastDelivered time.Time
	// ProbesLost counts probes that did not come back, since New.
	ProbesLost int64
	// FallbackPoll is the polling interval in force while Listener is
	// ListenerNotDelivering (Config.FallbackPoll).
	FallbackPoll time.Duration

	// Leases is the number of leases held now.
	Leases int
	// LastRenewalRound is when the background renewer last completed a
	// round without a failed statement (a round with nothing due counts);
	// RenewalAge is the time since. The renewer runs a round every
	// RenewEvery/4, so a larger age means renewals are failing or stuck.
	LastRenewalRound time.Time
	RenewalAge       time.Duration

	// NodeUnchecked reports that the database refuses grants because the
	// token floor was not checked on the node it runs on now (a failover or
	// restore; ErrFailoverUnchecked), read by Health's own statement.
	// CheckedNode and Node name the nodes (as FailoverError does).
	NodeUnchecked     bool
	CheckedNode, Node string
	// RefusedSince is when this Manager's grants started being refused by
	// the database (unchecked node or token floor), zero when the last
	// attempt was not refused; Refused counts the refusals since then.
	RefusedSince time.Time
	Refused      int64

	// SchemaMigrated reports that the schema has every lease migration this
	// build embeds (migrations.Validate).
	SchemaMigrated bool
	// Err is the first error Health met asking the database (unreachable,
	// or a *migrations.NotMigratedError); nil when it answered.
	Err error

	// Ready reports that Problems is empty: the Manager can grant and keep
	// leases now.
	Ready bool
	// Problems lists what stops the Manager from granting or keeping
	// leases: Err, a schema not migrated, an unchecked node or grants
	// refused, or a last complete renewal round older than RenewEvery +
	// CallTimeout.
	Problems []string
	// Warnings lists what degrades the Manager without stopping it: a
	// listener that does not receive notifications (the Manager polls
	// every FallbackPoll instead) or that is reconnecting.
	Warnings []string
}

// Health reports the Manager's state: the listener's (is it receiving
// notifications?), the age of the last complete renewal round, grants
// refused and since when, whether the node is unchecked after a failover,
// and whether the schema is migrated. It asks the database (two short
// read-only statements, bounded by CallTimeout) and changes nothing;
// Health.Err holds what went wrong asking. It works on a closed Manager
// too (the listener is then ListenerStopped).
func (m *Manager) Health(ctx context.Context) Health {
	h := Health{FallbackPoll: m.cfg.FallbackPoll, ListenerDedicated: m.cfg.listen != nil}
	h.Listener, h.ListenerSince, h.LastDelivered, h.ProbesLost = m.lh.snapshot()
	m.mu.Lock()
	h.Leases = len(m.leases)
	m.mu.Unlock()
	h.LastRenewalRound = time.Unix(0, m.lastRound.Load())
	h.RenewalAge = max(time.Since(h.LastRenewalRound), 0)

	cctx, cancel := m.call(ctx)
	defer cancel()
	err := migrations.Validate(cctx, m.pool, migrations.Options{Schema: m.cfg.Schema}, migrations.Lease)
	h.SchemaMigrated = err == nil
	if err == nil {
		var checked *string
		err = m.pool.QueryRow(cctx, m.st.node).Scan(&checked, &h.Node)
		if checked != nil {
			h.CheckedNode = *checked
		}
		if err == nil {
			h.NodeUnchecked = h.CheckedNode != h.Node
			if !h.NodeUnchecked {
				m.refusals.checked(m)
			}
		}
	}
	if err != nil {
		h.Err = err
		if !errors.Is(err, migrations.ErrNotMigrated) {
			h.Err = fmt.Errorf("lease: health: %w", err)
		}
	}
	h.RefusedSince, h.Refused = m.refusals.snapshot()
	h.Problems, h.Warnings = h.problems(m.cfg.RenewEvery+m.cfg.CallTimeout), h.warnings()
	h.Ready = len(h.Problems) == 0
	return h
}

func (h Health) problems(maxRenewalAge time.Duration) []string {
	var p []string
	if h.Err != nil {
		p = append(p, "database: "+h.Err.Error())
	} else if !h.SchemaMigrated {
		p = append(p, "schema not migrated")
	}
	if h.NodeUnchecked {
		p = append(p, fmt.Sprintf("grants refused: token floor not checked on node %s (checked on %q)", h.Node, h.CheckedNode))
	} else if !h.RefusedSince.IsZero() {
		p = append(p, fmt.Sprintf("grants refused since %s (%d refusals)", h.RefusedSince.Format(time.RFC3339), h.Refused))
	}
	if h.RenewalAge > maxRenewalAge {
		p = append(p, fmt.Sprintf("no complete renewal round for %s", h.RenewalAge.Round(time.Millisecond)))
	}
	return p
}

func (h Health) warnings() []string {
	switch h.Listener {
	case ListenerNotDelivering:
		return []string{fmt.Sprintf("listener does not receive notifications since %s: polling every %s (set Config.ListenConnString to a direct or session-mode connection)",
			h.ListenerSince.Format(time.RFC3339), h.FallbackPoll)}
	case ListenerConnecting:
		return []string{"listener reconnecting since " + h.ListenerSince.Format(time.RFC3339)}
	}
	return nil
}

// listenHealth is the listener's state for Health. notDelivering is the
// verdict of the last probe; it survives a reconnect (the fallback keeps
// polling until a probe comes back).
type listenHealth struct {
	mu            sync.Mutex
	state         ListenerState
	since         time.Time
	notDelivering bool
	lastDelivered time.Time
	lost          int64
}

func (h *listenHealth) setLocked(s ListenerState) {
	if h.state != s {
		h.state, h.since = s, time.Now()
	}
}

// set records a connection state (Connecting, Unverified or Stopped). A
// listener known not to deliver stays ListenerNotDelivering once it listens
// again. It reports whether a polling fallback ended (Stopped).
func (h *listenHealth) set(s ListenerState) (fallbackEnded bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case s == ListenerStopped:
		fallbackEnded = h.notDelivering
		h.notDelivering = false
	case s == ListenerUnverified && h.notDelivering:
		s = ListenerNotDelivering
	}
	h.setLocked(s)
	return fallbackEnded
}

// polling reports whether the polling fallback is on.
func (h *listenHealth) polling() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.notDelivering && h.state == ListenerNotDelivering
}

// delivered records a probe that came back; true when it ends the fallback.
func (h *listenHealth) delivered() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastDelivered = time.Now()
	h.setLocked(ListenerDelivering)
	ended := h.notDelivering
	h.notDelivering = false
	return ended
}

// probeLost records a probe that did not come back; true when it starts
// the fallback.
func (h *listenHealth) probeLost() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lost++
	h.setLocked(ListenerNotDelivering)
	started := !h.notDelivering
	h.notDelivering = true
	return started
}

func (h *listenHealth) snapshot() (ListenerState, time.Time, time.Time, int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state, h.since, h.lastDelivered, h.lost
}

// refusalSummaryEvery is how often a continuing run of refused grants is
// logged again (with its count) after the Error record that started it.
const refusalSummaryEvery = time.Minute

// refusalLog turns grant refusals (unchecked node, token floor) into few log
// records: one Error record when refusals start or their reason changes,
// then at most one per refusalSummaryEvery with the count, and one Info
// record when a grant succeeds again. Metrics count every refusal.
type refusalLog struct {
	mu        sync.Mutex
	since     time.Time
	n, logged int64
	lastLog   time.Time
	reason    string
	active    atomic.Bool // fast path for grants
}

// refused records one refusal; reason identifies its state (kind and
// nodes). It returns whether to log the refusal in full (a state change),
// and otherwise whether a summary is due, with the count and start.
func (r *refusalLog) refused(reason string) (full, summary bool, n int64, since time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if r.since.IsZero() || r.reason != reason {
		if r.since.IsZero() {
			r.since, r.n = now, 0
		}
		r.reason = reason
		r.n++
		r.logged, r.lastLog = r.n, now
		r.active.Store(true)
		return true, false, r.n, r.since
	}
	r.n++
	if now.Sub(r.lastLog) >= refusalSummaryEvery {
		r.logged, r.lastLog = r.n, now
		return false, true, r.n, r.since
	}
	return false, false, r.n, r.since
}

// cleared ends a run of refusals (a grant succeeded, or Health found the
// node checked); ok reports that one was running.
func (r *refusalLog) cleared() (ok bool, n int64, since time.Time) {
	if !r.active.Load() {
		return false, 0, time.Time{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.since.IsZero() {
		return false, 0, time.Time{}
	}
	ok, n, since = true, r.n, r.since
	r.since, r.n, r.reason = time.Time{}, 0, ""
	r.active.Store(false)
	return ok, n, since
}

// checked ends a run of refusals and logs it.
func (r *refusalLog) checked(m *Manager) {
	if ok, n, since := r.cleared(); ok {
		m.log.Info("lease: grants accepted again", "refusals", n, "refused_since", since, "refused_for", time.Since(since).Round(time.Millisecond))
	}
}

func (r *refusalLog) snapshot() (time.Time, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.since, r.n
}
