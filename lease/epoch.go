package lease

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// epoch is one heartbeat epoch of a Manager. Its leases point to it
// (Lease.ep); the Manager's current epoch is heartbeatRenewal.ep.
type epoch struct {
	id    uuid.UUID
	param any          // id as a statement parameter (uuidParam), boxed once for every grant that names the epoch
	held  atomic.Int64 // leases of the epoch registered with the Manager

	mu      sync.Mutex
	trust   time.Time   // sent_at + TTL − SafetyMargin of the last successful beat (monotonic)
	sentAt  time.Time   // sent_at of the last successful beat (or of the creation)
	expires time.Time   // database expiry after the last successful beat
	dbNow   time.Time   // database time of the last successful beat: the next beat reads records since then
	timer   *time.Timer // fires at trust
	failed  bool        // a beat statement failed since the last success
	dead    bool
	cause   error // why it ended (dead)
}

// usable reports whether the epoch is live locally with at least left of
// trust remaining.
func (ep *epoch) usable(left time.Duration) bool {
	if ep == nil {
		return false
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return !ep.dead && time.Until(ep.trust) >= left
}

func (ep *epoch) isDead() (bool, error) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.dead, ep.cause
}

// state returns the trust deadline, the database expiry and whether a beat
// failed since the last success.
func (ep *epoch) state() (trust, expires time.Time, failed bool) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.trust, ep.expires, ep.failed
}

// heartbeatOverlap is how far before the previous beat's database time a
// beat reads the displaced-run records: a record carries its takeover's
// start time and may commit up to a statement bound later.
func (m *Manager) heartbeatOverlap() time.Duration { return m.cfg.TTL + m.cfg.CallTimeout }

// usableEpoch returns the epoch a grant is to name: the current one while it
// has at least CallTimeout of trust left, else the current one after a beat,
// else a new one.
func (h *heartbeatRenewal) usableEpoch(ctx context.Context) (*epoch, error) {
	m := h.m
	if ep := h.ep.Load(); ep.usable(m.cfg.CallTimeout) {
		return ep, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	ep := h.ep.Load()
	if ep.usable(m.cfg.CallTimeout) {
		return ep, nil
	}
	if ep != nil {
		if dead, _ := ep.isDead(); !dead {
			if err := h.beat(ctx, ep); err != nil {
				return nil, err
			}
			if dead, _ := ep.isDead(); !dead {
				return ep, nil
			}
		}
	}
	return h.createEpochLocked(ctx)
}

// createEpochLocked starts a new epoch (h.mu held).
func (h *heartbeatRenewal) createEpochLocked(ctx context.Context) (*epoch, error) {
	m := h.m
	if m.isClosed() {
		return nil, ErrClosed
	}
	id, err := uuid.NewRandom()
	if err != nil {
		return nil, fmt.Errorf("lease: new heartbeat id: %w", err)
	}
	cctx, cancel := m.call(ctx)
	defer cancel()
	sentAt := time.Now()
	var started, expires time.Time
	if err := m.pool.QueryRow(cctx, m.st.epochCreate, uuidParam(id), nil, m.ttlMicros()).Scan(&started, &expires); err != nil {
		return nil, fmt.Errorf("lease: start heartbeat: %w", classify(err))
	}
	ep := &epoch{id: id, param: uuidParam(id), trust: sentAt.Add(m.cfg.TTL - m.cfg.SafetyMargin), sentAt: sentAt, expires: expires, dbNow: started}
	ep.mu.Lock()
	ep.timer = time.AfterFunc(time.Until(ep.trust), func() { m.onEpochTrust(ep) })
	ep.mu.Unlock()
	if m.isClosed() { // Close ran meanwhile: it may have missed this epoch
		m.endEpoch(ep, ErrClosed)
		_ = m.expireEpoch(ctx, ep) // best effort: it expires by TTL otherwise
		return nil, ErrClosed
	}
	h.ep.Store(ep)
	m.met.onHeartbeatStarted(ctx)
	m.log.Debug("lease heartbeat started", "manager_id", id)
	return ep, nil
}

// closeEpoch ends the current epoch at Close: locally (its leases are
// already ended) and in the database, so that rows the release at Close
// missed are free at once.
func (h *heartbeatRenewal) closeEpoch(ctx context.Context) error {
	m := h.m
	h.mu.Lock()
	defer h.mu.Unlock()
	ep := h.ep.Load()
	if ep == nil {
		return nil
	}
	m.endEpoch(ep, ErrClosed)
	return m.expireEpoch(ctx, ep)
}

// expireEpoch moves ep's expiry to now in the database.
func (m *Manager) expireEpoch(ctx context.Context, ep *epoch) error {
	cctx, cancel := m.call(context.WithoutCancel(ctx))
	defer cancel()
	if _, err := m.pool.Exec(cctx, m.st.epochEnd, ep.param); err != nil {
		return fmt.Errorf("lease: end heartbeat at close: %w", classify(err))
	}
	return nil
}

// epochID is the epoch a statement names: NULL (per-lease) for nil.
func epochID(ep *epoch) any {
	if ep == nil {
		return nil
	}
	return ep.param
}
