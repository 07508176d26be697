package lease

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// Per-lease mode (Config.Renewal = RenewalPerLease): each lease's own row
// carries a finite expires_at, renewed in batches by renewLoop; each lease
// has its own trust timer (Lease.timer) and deadlines (Lease.trust,
// Lease.expires, Lease.due). A displaced run's renewal is refused and ends
// it with ErrTakenOver (refusedCauses), so only the listener tells it
// sooner; the listener's catch-up and its polling fallback ask by run_id
// (endDisplacedRuns).

// perLeaseRenewal is the renewal of a Manager in per-lease mode.
type perLeaseRenewal struct{ m *Manager }

func (r perLeaseRenewal) start() {
	r.m.wg.Add(1)
	go r.m.renewLoop()
}

// grantEpoch: per-lease grants name no epoch.
func (perLeaseRenewal) grantEpoch(context.Context) (*epoch, error) { return nil, nil }

func (perLeaseRenewal) grantGone(context.Context, *epoch) bool { return false }

// attach starts the lease's own trust timer.
func (r perLeaseRenewal) attach(l *Lease, expires, sentAt time.Time) error {
	cfg := &r.m.cfg
	l.mu.Lock()
	l.expires = expires
	l.trust = sentAt.Add(cfg.TTL - cfg.SafetyMargin)
	l.due = sentAt.Add(cfg.RenewEvery)
	l.timer = time.AfterFunc(time.Until(l.trust), l.onTrustTimer)
	l.mu.Unlock()
	return nil
}

func (perLeaseRenewal) detach(*Lease) {}

func (perLeaseRenewal) deadlines(l *Lease) (trust, expires time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.trust, l.expires
}

func (perLeaseRenewal) failed(l *Lease) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failed
}

func (perLeaseRenewal) freeze(*Lease) {}

// renew renews the lease's own row.
func (r perLeaseRenewal) renew(ctx context.Context, l *Lease) (Renewal, error) {
	res, err := r.m.renewOne(ctx, l.key, l.runID)
	switch {
	case err == nil:
		l.extend(time.Time{}, res.TrustDeadline, res.ExpiresAt)
	case errors.Is(err, ErrLost):
		l.lose(lossCause(err))
	}
	return res, err
}

// unconfirmed: the row expires by TTL.
func (perLeaseRenewal) unconfirmed(Key, uuid.UUID, *epoch) {}

// unparked: the row, if still this Manager's, expires by TTL. It is not
// parked again: with no epoch to tell them apart, a second park could
// catch the run after another Manager resumed it.
func (perLeaseRenewal) unparked(Key, uuid.UUID, *epoch, time.Duration) {}

// takeUnconfirmed: none are kept (unconfirmed).
func (perLeaseRenewal) takeUnconfirmed() []unreleased { return nil }

func (r perLeaseRenewal) catchUp(ctx context.Context, q querier) {
	r.m.endDisplacedRuns(ctx, q)
}

// fallback ends the displaced leases, asking through the pool (a
// misdirected ListenConnString may not even reach the lease schema): no
// heartbeat reads the displaced records in this mode, and a lease would
// otherwise learn only at its next renewal.
func (r perLeaseRenewal) fallback(ctx context.Context) {
	r.m.endDisplacedRuns(ctx, r.m.pool)
}

func (perLeaseRenewal) close(context.Context) error { return nil }

// renewLoop is the Manager's single renewer. It ticks every RenewEvery/4;
// each tick it collects the leases whose renewal falls due before the next
// tick and renews them in batches of at most MaxBatch leases, one statement
// per batch, up to renewParallel batches at once on separate connections of
// the pool, so leases acquired at different times fall into at most a few
// groups, 10,000 leases need about 10 statements per period and 100,000
// leases are renewed by several backends in parallel. A lease is therefore
// renewed between RenewEvery·3/4 and RenewEvery after its last sent_at.
// Leases missing from a batch's RETURNING are lost (ErrLost). A failing
// statement leaves its leases to their trust timers and retries them on a
// later tick; a retry matches the run_id again, so a batch whose reply was
// lost after it committed reports the true state on the next tick.
func (m *Manager) renewLoop() {
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
		due := m.collectDue(time.Now().Add(tick))
		if len(due) == 0 || m.renewDue(due) {
			m.lastRound.Store(time.Now().UnixNano())
		}
	}
}

// collectDue marks the leases due by horizon as in flight and returns them.
func (m *Manager) collectDue(horizon time.Time) (due []*Lease) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, l := range m.leases {
		l.mu.Lock()
		if !l.done && !l.inflight && !l.due.After(horizon) {
			l.inflight = true
			due = append(due, l)
		}
		l.mu.Unlock()
	}
	return due
}

// renewParallel bounds the renewal statements one Manager has in flight at
// once; renewWorkers lowers it to half the pool so that renewal never holds
// every connection acquires need.
const renewParallel = 4

func (m *Manager) renewWorkers() int {
	return min(renewParallel, max(1, int(m.pool.Config().MaxConns)/2))
}

// renewDue renews due in key order: the leases are sorted by key and cut
// into consecutive, disjoint batches, each of which locks its rows in key
// order, so batches in flight at the same time (here or in another Manager)
// cannot deadlock. Batches are balanced in size and handed to at most
// renewWorkers goroutines; renewDue returns when all are done, reporting
// whether every statement succeeded.
func (m *Manager) renewDue(due []*Lease) bool {
	slices.SortFunc(due, func(a, b *Lease) int {
		return cmp.Or(cmp.Compare(a.key.AccountID, b.key.AccountID), cmp.Compare(a.key.SessionID, b.key.SessionID))
	})
	if len(due) == 0 {
		return true
	}
	size := int(m.renewBatch.Load())
	n := (len(due) + size - 1) / size // batches
	size = (len(due) + n - 1) / n     // balanced: n batches of at most MaxBatch
	workers := min(m.renewWorkers(), n)
	var failed atomic.Bool
	if workers == 1 {
		for start := 0; start < len(due); start += size {
			if m.root.Err() != nil {
				return false
			}
			if !m.renewChunk(due[start:min(start+size, len(due))]) {
				failed.Store(true)
			}
		}
		return !failed.Load()
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || m.root.Err() != nil {
					return
				}
				if !m.renewChunk(due[i*size : min((i+1)*size, len(due))]) {
					failed.Store(true)
				}
			}
		})
	}
	wg.Wait()
	return !failed.Load() && m.root.Err() == nil
}

// renewChunk renews one batch; false when its statement failed.
func (m *Manager) renewChunk(chunk []*Lease) bool {
	accts, sess, runs := make([]string, len(chunk)), make([]string, len(chunk)), make([]string, len(chunk))
	for i, l := range chunk {
		accts[i], sess[i], runs[i] = l.key.AccountID, l.key.SessionID, l.runID.String()
	}
	ctx, cancel := m.call(m.background())
	defer cancel()
	ctx, sp := m.startBatch(ctx, len(chunk))
	sentAt := time.Now()
	renewed := make(map[uuid.UUID]time.Time, len(chunk))
	rows, err := m.pool.Query(ctx, m.st.renewBatch, accts, sess, runs, m.ttlMicros())
	if err == nil {
		for rows.Next() {
			var (
				a, s string
				rid  uuid.UUID
				exp  time.Time
			)
			if err = rows.Scan(&a, &s, &rid, &exp); err != nil {
				break
			}
			renewed[rid] = exp
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	m.met.onRenew(ctx, time.Since(sentAt), err)
	if err != nil {
		for _, l := range chunk {
			l.renewFailed()
			l.retryAt(time.Now()) // next tick
		}
		m.observe(event{kind: evBatch, n: len(chunk), failed: true})
		sp.endBatch(0, 0, err)
		if m.root.Err() == nil {
			m.log.Warn("lease renewal failed; leases stay trusted until their deadlines", "leases", len(chunk), "err", err)
		}
		return false
	}
	trust := sentAt.Add(m.cfg.TTL - m.cfg.SafetyMargin)
	var refused []*Lease
	for _, l := range chunk {
		if exp, ok := renewed[l.runID]; ok {
			l.extend(sentAt, trust, exp)
			continue
		}
		refused = append(refused, l)
		l.retryAt(time.Time{})
	}
	for i, cause := range m.refusedCauses(ctx, refused) { // ErrLost or ErrTakenOver
		refused[i].lose(cause)
	}
	lost := len(refused)
	m.observe(event{kind: evBatch, n: len(chunk)})
	sp.endBatch(len(chunk)-lost, lost, nil)
	return true
}
