package lease

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/google/uuid"
)

// renewLoop is the Manager's single renewer. Each pass it collects the
// leases whose renewal is due (or nearly due, so that leases acquired close
// together share a statement) and renews them in batches of MaxBatch, one
// statement per batch. Leases missing from a batch's RETURNING are lost
// (ErrLost). A failing statement leaves its leases to their trust timers
// and retries them after RenewEvery/4.
func (m *Manager) renewLoop() {
	defer m.wg.Done()
	timer := time.NewTimer(m.cfg.RenewEvery)
	defer timer.Stop()
	for {
		due, next := m.collectDue(time.Now())
		if len(due) > 0 {
			m.renewDue(due)
			continue
		}
		wait := m.cfg.RenewEvery
		if !next.IsZero() {
			wait = time.Until(next)
		}
		timer.Reset(max(wait, time.Millisecond))
		select {
		case <-m.root.Done():
			return
		case <-m.wake:
		case <-timer.C:
		}
	}
}

// collectDue marks the leases due by now+slack as in flight and returns
// them, and the earliest due time of the rest.
func (m *Manager) collectDue(now time.Time) (due []*Lease, next time.Time) {
	horizon := now.Add(m.cfg.RenewEvery / 5)
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, l := range m.leases {
		l.mu.Lock()
		switch {
		case l.done || l.inflight:
		case !l.due.After(horizon):
			l.inflight = true
			due = append(due, l)
		case next.IsZero() || l.due.Before(next):
			next = l.due
		}
		l.mu.Unlock()
	}
	return due, next
}

func (m *Manager) renewDue(due []*Lease) {
	// Lock rows in key order so concurrent batches cannot deadlock.
	slices.SortFunc(due, func(a, b *Lease) int {
		return cmp.Or(cmp.Compare(a.key.AccountID, b.key.AccountID), cmp.Compare(a.key.SessionID, b.key.SessionID))
	})
	for start := 0; start < len(due); start += MaxBatch {
		if m.root.Err() != nil {
			return
		}
		m.renewChunk(due[start:min(start+MaxBatch, len(due))])
	}
}

func (m *Manager) renewChunk(chunk []*Lease) {
	accts, sess, runs := make([]string, len(chunk)), make([]string, len(chunk)), make([]uuid.UUID, len(chunk))
	for i, l := range chunk {
		accts[i], sess[i], runs[i] = l.key.AccountID, l.key.SessionID, l.runID
	}
	ctx, cancel := context.WithTimeout(m.root, m.cfg.CallTimeout)
	defer cancel()
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
	if err != nil {
		retry := time.Now().Add(m.cfg.RenewEvery / 4)
		for _, l := range chunk {
			l.retryAt(retry)
		}
		m.obs.renewBatch(len(chunk), 0, 0, time.Since(sentAt), err)
		if m.root.Err() == nil {
			m.log.Warn("lease renewal failed; leases stay trusted until their deadlines", "leases", len(chunk), "err", err)
		}
		return
	}
	trust := sentAt.Add(m.cfg.TTL - m.cfg.SafetyMargin)
	lost := 0
	for _, l := range chunk {
		if exp, ok := renewed[l.runID]; ok {
			l.extend(sentAt, trust, exp)
			continue
		}
		lost++
		l.retryAt(time.Time{})
		l.end(ErrLost)
	}
	m.obs.renewBatch(len(chunk), len(chunk)-lost, lost, time.Since(sentAt), nil)
}
