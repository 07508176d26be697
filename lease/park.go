package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencekit/fencekit/fence"
)

// Parked grants (migration 0012; docs/lease.md, "Parked grants: a run that
// moves between processes").
//
// Lease.Park turns the run's row into a parked grant: same run_id and
// token, not released, a finite expiry idle from the database's now, no
// manager_id (no heartbeat keeps it, no process renews it), parked_run_id
// = run_id. Manager.Resume, in any Manager, takes such a row back in one
// statement and returns a Lease of the same grant. A row is parked iff
// parked_run_id = run_id: a grant writes a new run_id, so the grant
// statements need no change, and the renewal statements exclude parked
// rows (notParkedSQL).

// MaxParkIdle is the longest idle bound Lease.Park accepts: how long a
// parked grant may wait for Manager.Resume before it expires.
const MaxParkIdle = 24 * time.Hour

// Park hands the grant over to the database, for Manager.Resume to
// continue in any Manager (another process, or this one later), with the
// same run_id and token. In one statement, if the run still holds its row,
// the row becomes a parked grant: not released, expiring idle from the
// database's now (not renewed by anyone meanwhile), and held by no
// Manager, so that neither this Manager's heartbeat nor its Close ends it.
// A new grant of the key (Acquire) is refused while it is parked;
// Takeover, Revoke and Release (by run_id) work on it as on any held
// grant.
//
// Stop the work done under the lease before calling Park: once the park
// commits, another Manager may resume the run, and guards accept both
// processes' writes under the one token. The Manager stops renewing the
// lease before the statement is sent; a renewal already in flight cannot
// touch a parked row (renewals exclude parked rows).
//
// Outcomes:
//   - nil: the grant is parked; the Lease's context is cancelled with
//     ErrParked (also when a park whose reply was lost is retried: a run
//     already parked is reported parked).
//   - an error matching ErrLost (and ErrTakenOver when a Takeover displaced
//     the run): the run no longer held its row (taken over, expired,
//     released, revoked); the Lease ends with ErrLost or ErrTakenOver.
//   - another error (a lost reply, ctx ended, network): the outcome is
//     unknown. The Lease ends anyway (ErrParked): the run is either parked
//     until idle passes, or its row is still held by this Manager as it
//     was. In heartbeat mode the Manager then parks it again in the
//     background until a park statement succeeds, its heartbeat ends or it
//     closes (Close parks it again too); in per-lease mode the unrenewed row
//     expires within TTL. Manager.Resume tells which (ErrRunActive while the
//     row is still this Manager's, ErrLost once it expired).
//   - a *fence.ConfigError (matching fence.ErrInvalidConfig, Field "idle") when idle is
//     not in (0, MaxParkIdle]: nothing is sent and the Lease is unchanged.
//   - the cause of a Lease that had already ended, unchanged.
//
// idle is truncated to microseconds, as TTL is.
func (l *Lease) Park(ctx context.Context, idle time.Duration) (err error) {
	if idle <= 0 || idle > MaxParkIdle {
		return configErr("idle", idle.String()+" must be > 0 and <= "+MaxParkIdle.String(), nil)
	}
	m := l.m
	ctx, sp := m.startSpan(ctx, spanPark, l.key)
	sp.run(l.runID, int64(l.token))
	defer func() { sp.end(err, "parked") }()
	if err := l.Err(); err != nil {
		return err
	}
	if !m.takeForPark(l) {
		// Another path is ending it (Close, a loss): report its cause.
		<-l.ctx.Done()
		return l.Err()
	}
	err = m.park(ctx, l.key, l.runID, idle, l.ep)
	switch {
	case err == nil:
		l.end(ErrParked)
		if m.log.Enabled(ctx, slog.LevelDebug) {
			m.log.Debug("lease parked", "key", l.key.String(), "run_id", l.runID, "token", int64(l.token), "idle", idle)
		}
	case errors.Is(err, ErrLost):
		l.end(lossCause(err))
	default:
		// Parked, or still this Manager's row (certainly so when the
		// statement was not sent): the renewal mode parks it again
		// (heartbeat) or lets it expire (per-lease).
		l.end(ErrParked)
		m.ren.unparked(l.key, l.runID, l.ep, idle)
	}
	return err
}

// errNotSent marks a park or resume statement that certainly was not sent
// (pgconn.SafeToRetry).
var errNotSent = errors.New("lease: statement not sent")

// takeForPark takes l out of the Manager, so that no renewal, heartbeat
// loss or Close touches it any more (Park ends it); false when l is no
// longer the Manager's (another path is ending it).
func (m *Manager) takeForPark(l *Lease) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.leases[l.runID] != l {
		return false
	}
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		return false
	}
	l.parking = true
	l.mu.Unlock()
	delete(m.leases, l.runID)
	m.ren.detach(l)
	return true
}

// park sends the park statement for (key, run) and explains a refusal: nil
// when the run is parked (by this statement, or already), an error
// matching ErrLost (and ErrTakenOver) when the run does not hold its row,
// otherwise the statement's error (wrapping errNotSent when it was
// certainly not sent).
func (m *Manager) park(ctx context.Context, key Key, run uuid.UUID, idle time.Duration, ep *epoch) error {
	cctx, cancel := m.call(ctx)
	defer cancel()
	var exp time.Time
	err := m.pool.QueryRow(cctx, m.st.park, key.AccountID, key.SessionID, uuidParam(run), idle.Microseconds(), epochID(ep)).Scan(&exp)
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, pgx.ErrNoRows):
		if pgconn.SafeToRetry(err) {
			return fmt.Errorf("lease: park %s: %w (%w)", key, classify(err), errNotSent)
		}
		return fmt.Errorf("lease: park %s: %w", key, classify(err))
	}
	st, err := m.inspect(ctx, key)
	switch {
	case err != nil:
		return err
	case st.RunID == run && st.Parked:
		return nil // parked already: a retry of a park that committed
	case m.wasTakenOver(ctx, key, run):
		return errTakenOverRenew(key, run)
	}
	return fmt.Errorf("%w: %s run %s no longer holds its lease (%s)", ErrLost, key, run, st.State)
}

// Resume takes the parked grant of run runID on key (Lease.Park, in any
// Manager) into this Manager, in one statement, and returns its Lease: the
// same run_id and the same token (no token is drawn: it is the grant
// continuing), a trust deadline from the statement's sent_at, a Context
// carrying the claim fence.Claim{Token, Run, Scope}, renewed by this
// Manager like a grant's (in heartbeat mode by its heartbeat, the row
// written only while the heartbeat is live; per-lease, expiring TTL from
// the database's now). WithHolder relabels the grant; without it the
// row's label is kept. ctx bounds the call and gives its values to the
// lease, as with Acquire. The Authorizer runs first, as for a grant.
//
// Outcomes:
//   - an error matching ErrRunActive: the run holds the key but is not
//     parked (active in this Manager or another one now); nothing changed.
//   - an error matching ErrLost: the run does not hold the key any more
//     (another run holds or held it since, it was released, revoked or
//     its park expired, or the key has no row); with ErrTakenOver too when
//     a Takeover displaced it.
//   - ErrInvalidRunID for uuid.Nil, the key's and the holder's validation
//     errors, ErrUnauthorized, ErrClosed: nothing sent.
//   - another error (a lost reply, ctx ended): the outcome is unknown; the
//     run is either still parked, or its row is this Manager's without a
//     Lease. In heartbeat mode the Manager parks such a row again in the
//     background (for TTL); in per-lease mode it expires within TTL.
//     Meanwhile Resume reports ErrRunActive.
//
// Resume does not pass the token floor or node gate of a grant: those
// guard the tokens a grant draws, and Resume draws none.
func (m *Manager) Resume(ctx context.Context, key Key, runID uuid.UUID, opts ...Option) (l *Lease, err error) {
	ctx, sp := m.startSpan(ctx, spanResume, key)
	defer func() { sp.endGrant(l, err) }()
	if runID == uuid.Nil {
		return nil, ErrInvalidRunID
	}
	o, err := m.admit(ctx, key, opts)
	if err != nil {
		return nil, err
	}
	if m.lookup(key, runID) != nil {
		return nil, errRunActive(key, runID)
	}
	l, retry, err := m.resumeAttempt(ctx, key, runID, o)
	if retry { // this Manager's heartbeat had ended: once more with a new one
		l, _, err = m.resumeAttempt(ctx, key, runID, o)
	}
	return l, err
}

func errRunActive(key Key, runID uuid.UUID) error {
	return fmt.Errorf("%w: %s run %s", ErrRunActive, key, runID)
}

// resumeAttempt runs one resume statement. retry is true when it changed
// nothing because the Manager's heartbeat epoch had ended in the database.
func (m *Manager) resumeAttempt(ctx context.Context, key Key, runID uuid.UUID, o grantOptions) (_ *Lease, retry bool, _ error) {
	ep, err := m.ren.grantEpoch(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("lease: resume %s: %w", key, err)
	}
	m.awaitListener(ctx)
	m.beginGrant(runID) // a takeover reported before the reply ends the lease at registration
	defer m.endGrant(runID)
	cctx, cancel := m.call(ctx)
	defer cancel()
	sentAt := time.Now() // before the request leaves: the trust window starts here
	var (
		token   int64
		expires *time.Time // NULL for a heartbeat row (the epoch's expiry)
		holder  *string
	)
	err = m.pool.QueryRow(cctx, m.st.resume, key.AccountID, key.SessionID, uuidParam(runID), m.ttlArg, nullable(o.Holder), epochID(ep)).
		Scan(&token, &expires, &holder)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		st, ierr := m.inspect(ctx, key)
		switch {
		case ierr != nil:
			return nil, false, ierr
		case st.RunID != runID || st.State == StateNotFound:
			if m.wasTakenOver(ctx, key, runID) {
				return nil, false, fmt.Errorf("%w: %s run %s was taken over by another run (%w)", ErrLost, key, runID, ErrTakenOver)
			}
			return nil, false, fmt.Errorf("%w: %s run %s does not hold the key (another run holds or held it since)", ErrLost, key, runID)
		case !st.Held():
			return nil, false, fmt.Errorf("%w: %s run %s: its grant is %s", ErrLost, key, runID, st.State)
		case st.Parked && m.ren.grantGone(ctx, ep):
			return nil, true, fmt.Errorf("lease: resume %s: this Manager's heartbeat ended: %w", key, ErrLost)
		}
		// Held and not parked, or parked again since the statement ran
		// (resumed and parked by another Manager meanwhile): active.
		return nil, false, errRunActive(key, runID)
	case err != nil:
		if !pgconn.SafeToRetry(err) {
			// It may have committed: the row may be this Manager's now.
			m.ren.unparked(key, runID, ep, m.cfg.TTL)
		}
		return nil, false, fmt.Errorf("lease: resume %s: %w", key, classify(err))
	}
	var exp time.Time
	if expires != nil {
		exp = *expires
	}
	label := ""
	if holder != nil {
		label = *holder
	}
	l := m.newLease(ctx, key, runID, fence.Token(token), label, exp, sentAt, ep)
	if l == nil { // closed while resuming: park the run again (best effort)
		pctx, pcancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.CallTimeout)
		defer pcancel()
		_ = m.park(pctx, key, runID, m.cfg.TTL, ep)
		return nil, false, ErrClosed
	}
	m.met.onHeld(ctx, 1) // the -1 comes when it ends (or at Close)
	if m.log.Enabled(ctx, slog.LevelDebug) {
		m.log.Debug("lease resumed", "key", key.String(), "run_id", runID, "token", token)
	}
	return l, false, nil
}
