package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Releases that failed in heartbeat mode.
//
// A heartbeat row (expires_at 'infinity') is live while its epoch is, and
// the epoch is renewed for as long as the Manager runs. A run of the epoch
// whose release statement failed (an ended context, a lost connection, an
// Acquire or Takeover whose reply was lost and whose background release
// failed too) would hold its key until the Manager closed, where a
// per-lease row would have expired after one TTL. The Manager therefore
// keeps such runs (heartbeatRenewal.unrel) and one goroutine (releaseLoop) releases
// them in batched statements until a statement succeeds, which settles
// them whatever each row's state (the release statement changes only the
// run's own live row), or until their epoch ends (the rows end with it),
// or until Close (which ends the epoch).
//
// A park (Lease.Park) or resume (Manager.Resume) whose outcome is unknown
// is kept the same way, with its idle bound: the row may still be a
// heartbeat row of the epoch, held for as long as the Manager runs. It is
// parked again, not released (a release would end a run that the first
// statement did park), by the park statement restricted to rows that
// still name the epoch: a row already parked, or resumed since by another
// Manager (another epoch, or none), is left alone, and the retry is
// settled. Close parks such runs again too, before it ends the epoch.

// unreleased is a run of a heartbeat epoch whose release (or park, idle >
// 0) is not confirmed.
type unreleased struct {
	key  Key
	run  uuid.UUID
	ep   *epoch
	idle time.Duration // > 0: park the run again for idle rather than release it
}

// keepReleasing records that the release of (key, run), a run of ep, is not
// confirmed (or its park, when idle > 0); the release loop retries it. No
// epoch (nil: Manager.Release of a run this Manager does not hold) or an
// ended one needs nothing.
func (h *heartbeatRenewal) keepReleasing(key Key, run uuid.UUID, ep *epoch, idle time.Duration) {
	m := h.m
	if ep == nil {
		return
	}
	if dead, _ := ep.isDead(); dead {
		return
	}
	m.mu.Lock()
	if m.closed.Load() {
		m.mu.Unlock()
		return
	}
	h.unrel[run] = unreleased{key: key, run: run, ep: ep, idle: idle}
	m.mu.Unlock()
	m.log.Debug("lease release not confirmed; retrying while the heartbeat lives", "key", key.String(), "run_id", run, "manager_id", ep.id)
	select {
	case h.unrelKick <- struct{}{}:
	default:
	}
}

// releaseLoop retries the unconfirmed releases: at once when one is
// recorded, then every RenewEvery/2 while a retry fails. It sends nothing
// while there is nothing to release.
func (h *heartbeatRenewal) releaseLoop() {
	m := h.m
	defer m.wg.Done()
	ticker := time.NewTicker(max(m.cfg.RenewEvery/2, time.Millisecond))
	defer ticker.Stop()
	failed := false
	for {
		select {
		case <-m.root.Done():
			return
		case <-ticker.C:
		case <-h.unrelKick:
			if failed { // a retry failed: wait for the next tick
				continue
			}
		}
		failed = h.retryReleases() != nil
	}
}

// retryReleases sends the release of every unconfirmed run whose epoch is
// live (forgetting the others) and forgets those it sent once the
// statements succeed.
func (h *heartbeatRenewal) retryReleases() error {
	m := h.m
	m.mu.Lock()
	var batch []unreleased
	for run, u := range h.unrel {
		if dead, _ := u.ep.isDead(); dead {
			delete(h.unrel, run)
			continue
		}
		batch = append(batch, u)
	}
	m.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	ctx, cancel := m.call(m.background())
	defer cancel()
	if err := m.releaseRuns(ctx, batch); err != nil {
		m.log.Debug("lease release retry failed", "runs", len(batch), "err", err)
		return err
	}
	m.mu.Lock()
	for _, u := range batch {
		delete(h.unrel, u.run)
	}
	m.mu.Unlock()
	m.log.Debug("lease releases confirmed", "runs", len(batch))
	return nil
}

// releaseRuns releases runs in statements of at most MaxBatch rows each
// (and parks again, one statement each, those with an idle bound); it
// sends every statement and joins their errors.
func (m *Manager) releaseRuns(ctx context.Context, runs []unreleased) error {
	var errs []error
	rel := runs[:0:0]
	for _, u := range runs {
		if u.idle <= 0 {
			rel = append(rel, u)
			continue
		}
		// Only a row that still names u's epoch is parked; ErrLost (not
		// this Manager's row any more) settles it as well.
		if err := m.park(ctx, u.key, u.run, u.idle, u.ep); err != nil && !errors.Is(err, ErrLost) {
			errs = append(errs, err)
		}
	}
	runs = rel
	for start := 0; start < len(runs); start += MaxBatch {
		chunk := runs[start:min(start+MaxBatch, len(runs))]
		accts, sess, ids, payloads := make([]string, len(chunk)), make([]string, len(chunk)), make([]string, len(chunk)), make([]string, len(chunk))
		for i, u := range chunk {
			accts[i], sess[i], ids[i], payloads[i] = u.key.AccountID, u.key.SessionID, u.run.String(), keyPayload(u.key)
		}
		if _, err := m.pool.Exec(ctx, m.st.releaseBatch, accts, sess, ids, m.st.channel, payloads); err != nil {
			errs = append(errs, fmt.Errorf("lease: release %d leases: %w", len(chunk), classify(err)))
		}
	}
	return errors.Join(errs...)
}
