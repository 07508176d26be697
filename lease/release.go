package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/lease/internal/leasemetrics"
)

// ReleaseResult is the benign outcome of a release. Every value means the
// run does not hold the lease afterwards.
type ReleaseResult uint8

const (
	// ReleaseDone means this call released the run's unexpired lease.
	ReleaseDone ReleaseResult = iota + 1
	// ReleaseAlreadyDone means the run had released it before (e.g. a retry after
	// a lost reply).
	ReleaseAlreadyDone
	// ReleaseExpired means the run's lease had expired; nobody holds it now.
	ReleaseExpired
	// ReleaseNotHolder means another run has acquired the key since.
	ReleaseNotHolder
	// ReleaseNotFound means the key has no row.
	ReleaseNotFound
)

// String names the result as the "result" attribute of the
// fencekit.lease.released metric does (leasemetrics.Result* values).
func (r ReleaseResult) String() string {
	switch r {
	case ReleaseDone:
		return leasemetrics.ResultReleased
	case ReleaseAlreadyDone:
		return leasemetrics.ResultAlreadyReleased
	case ReleaseExpired:
		return leasemetrics.ResultExpired
	case ReleaseNotHolder:
		return leasemetrics.ResultNotHolder
	case ReleaseNotFound:
		return leasemetrics.ResultNotFound
	}
	return fmt.Sprintf("ReleaseResult(%d)", r)
}

// Release releases the lease of (key, runID) in one statement, keeping the
// row (released_at and expires_at set to the database's now) so per-key
// token order survives, and notifies waiters (pg_notify, delivered at
// commit). It never fails because the run no longer holds the lease: that
// is a ReleaseResult, and a retry reports the true state (ReleaseAlreadyDone
// after a release whose reply was lost). A Lease of this Manager with that
// run_id is cancelled (cause ErrReleased) before the statement is sent. When
// the statement fails for such a lease in heartbeat mode, the Manager goes
// on releasing the run in the background until a release succeeds or the
// heartbeat ends (docs/lease.md, "A release that failed").
func (m *Manager) Release(ctx context.Context, key Key, runID uuid.UUID) (res ReleaseResult, err error) {
	ctx, sp := m.startSpan(ctx, spanRelease, key)
	sp.run(runID, 0)
	defer func() { sp.endRelease(res, err) }()
	if err := key.Validate(); err != nil {
		return 0, err
	}
	if runID == uuid.Nil {
		return 0, ErrInvalidRunID
	}
	if m.isClosed() {
		return 0, ErrClosed
	}
	var ep *epoch
	if l := m.lookup(key, runID); l != nil {
		ep = l.ep
		l.end(ErrReleased)
	}
	res, err = m.release(ctx, key, runID)
	if err != nil {
		m.ren.unconfirmed(key, runID, ep)
	}
	return res, err
}

func (m *Manager) release(ctx context.Context, key Key, runID uuid.UUID) (ReleaseResult, error) {
	r, sent, left := m.releases.do(ctx, releaseReq{key: key, run: runID})
	err := r.err
	if !sent || left {
		err = ctx.Err() // ctx ended while the release was queued, or in a shared statement
	}
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		err = fmt.Errorf("lease: release %s: %w", key, classify(err))
		m.met.onReleased(ctx, 0, err)
		m.log.Debug("lease release failed", "key", key.String(), "run_id", runID, "err", err)
		return 0, err
	}
	res := ReleaseDone
	if err != nil {
		// Nothing released: read the committed state once to say why.
		st, ierr := m.inspect(ctx, key)
		switch {
		case ierr != nil:
			return 0, ierr
		case st.State == StateNotFound:
			res = ReleaseNotFound
		case st.RunID != runID:
			res = ReleaseNotHolder
		case st.State == StateReleased:
			res = ReleaseAlreadyDone
		default:
			res = ReleaseExpired
		}
	}
	m.met.onReleased(ctx, res, nil)
	if m.log.Enabled(ctx, slog.LevelDebug) {
		m.log.Debug("lease released", "key", key.String(), "run_id", runID, "result", res.String())
	}
	return res, nil
}

// lookup returns this Manager's held lease of (key, runID), if any.
