package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/fence"
)

// Revocation is the outcome of Revoke.
type Revocation struct {
	// Revoked is true when this call ended a live grant.
	Revoked bool
	// RunID and Token name the grant this call ended (zero unless Revoked).
	RunID uuid.UUID
	Token fence.Token
	// Ownership is the key's state after the call: StateExpired with the
	// revoked grant's run and token when Revoked, otherwise the state that
	// explains why nothing was revoked (not found, released, expired, or
	// held by another run than the one asked for).
	Ownership Ownership
}

// revokeSQL ends the live grant of a key in one statement. $1 account, $2
// session, $3 the holder's run_id as text or NULL (whichever run holds it),
// $4 channel, $5 payload. The row is kept with expires_at moved to the
// statement's time, released_at left NULL (the grant expired, it was not
// released): renewals, which need expires_at in the future, are refused;
// the holder's release reports ReleaseExpired; the next grant takes the
// ON CONFLICT path and draws its token under the row lock, larger than the
// revoked one. Like a release it notifies the key's waiters and watchers
// (only when the key was ever contended). It draws no token, so neither
// the token floor nor the node check gates it. Values are bound as text,
// booleans and strings only, so it runs in every QueryExecMode.
//
// A live row is judged by liveSQL (either kind, migration 0009), locked
// first (FOR UPDATE re-reads a row changed meanwhile and checks it again).
// A heartbeat row becomes a finite, expired row; its run is also recorded
// in fencekit_displaced with its epoch and cause 'revoked', which the
// holder's next heartbeat statement returns: the holder ends the lease
// (ErrLost) within RenewEvery although its heartbeat goes on.
func revokeSQL(qSchema string) string {
	return strings.ReplaceAll(`WITH cur AS MATERIALIZED (
  SELECT l.account_id, l.session_id, l.manager_id, l.expires_at AS old_expires
    FROM $S.fencekit_leases l
   WHERE l.account_id = $1::text AND l.session_id = $2::text
     AND ($3::text IS NULL OR l.run_id = $3::text::uuid)
     AND `+liveSQL("l", "statement_timestamp()")+`
     FOR UPDATE OF l),
upd AS (
  UPDATE $S.fencekit_leases l
     SET expires_at = statement_timestamp()
    FROM cur c
   WHERE l.account_id = c.account_id AND l.session_id = c.session_id
  RETURNING l.run_id, l.fence_token, l.acquired_at, l.renewed_at, l.expires_at, l.holder, l.contended,
            c.manager_id, c.old_expires),
rec AS (
  INSERT INTO $S.fencekit_displaced (run_id, account_id, session_id, displaced_at, by_run_id, manager_id, cause)
  SELECT u.run_id, $1::text, $2::text, statement_timestamp(), NULL, u.manager_id, 'revoked'
    FROM upd u
   WHERE u.old_expires = 'infinity' AND u.manager_id IS NOT NULL
  ON CONFLICT (run_id) DO NOTHING)
SELECT u.run_id::text, u.fence_token, u.acquired_at, u.renewed_at, u.expires_at, u.holder, statement_timestamp(),
       CASE WHEN u.contended THEN pg_notify($4::text, $5::text) END IS NULL
  FROM upd u`, "$S", qSchema)
}

// Revoke ends the current grant of key now, for an operator whose
// conversation is stuck with a holder that no longer makes progress: in
// one statement the grant is expired on the database clock. From its commit
// the holder's renewals are refused (ErrLost, so its Manager cancels the
// lease's context at the latest at its next renewal or heartbeat; a Lease
// of this Manager is cancelled at once), its release changes nothing
// (ReleaseExpired), and the next grant of the key carries a larger token,
// which the guards prefer over the revoked one. Waiters and watchers of the
// key are woken as by a release. Work the holder has in flight is not
// stopped, and its writes stay acceptable to the guards until a later
// grant has written with its larger token.
//
// runID names the grant to end: a later grant of another run is left
// alone (Revoked false). uuid.Nil is invalid input (ErrInvalidRunID,
// nothing sent), as for Release, Renew and Resume; RevokeCurrent ends
// whichever grant is live. A key nobody holds (never acquired, released,
// expired) is not an error: Revoked is false and Ownership says why. The
// Authorizer runs first, as for Takeover.
func (m *Manager) Revoke(ctx context.Context, key Key, runID uuid.UUID) (Revocation, error) {
	if err := key.Validate(); err != nil {
		return Revocation{}, err
	}
	if runID == uuid.Nil {
		return Revocation{}, ErrInvalidRunID
	}
	s := runID.String()
	return m.revoke(ctx, key, &s)
}

// RevokeCurrent is Revoke of whichever run holds key now, for an operator
// who has no run id at hand (fencekit leases revoke without --run). A grant
// made between the operator's look and this call is revoked too; Revoke
// with the run id Inspect reported leaves such a grant alone.
func (m *Manager) RevokeCurrent(ctx context.Context, key Key) (Revocation, error) {
	if err := key.Validate(); err != nil {
		return Revocation{}, err
	}
	return m.revoke(ctx, key, nil)
}

// revoke is Revoke of run, or of whichever run holds key when run is nil.
func (m *Manager) revoke(ctx context.Context, key Key, run *string) (Revocation, error) {
	if m.isClosed() {
		return Revocation{}, ErrClosed
	}
	if err := m.authorize(ctx, key); err != nil {
		return Revocation{}, err
	}
	cctx, cancel := m.call(ctx)
	defer cancel()
	var (
		rid           string
		token         int64
		acq, ren, exp time.Time
		holder        *string
		now           time.Time
		notified      bool
	)
	err := m.pool.QueryRow(cctx, revokeSQL(m.cfg.qSchema), key.AccountID, key.SessionID, run, m.st.channel, keyPayload(key)).
		Scan(&rid, &token, &acq, &ren, &exp, &holder, &now, &notified)
	if errors.Is(err, pgx.ErrNoRows) {
		st, ierr := m.inspect(ctx, key)
		if ierr != nil {
			return Revocation{}, ierr
		}
		return Revocation{Ownership: st}, nil
	}
	if err != nil {
		return Revocation{}, fmt.Errorf("lease: revoke %s: %w", key, classify(err))
	}
	revoked, err := uuid.Parse(rid)
	if err != nil {
		return Revocation{}, fmt.Errorf("lease: revoke %s: run id %q from the database: %w", key, rid, err)
	}
	r := Revocation{
		Revoked: true, RunID: revoked, Token: fence.Token(token),
		Ownership: Ownership{
			Key: key, State: StateExpired, RunID: revoked, Token: fence.Token(token),
			AcquiredAt: acq, RenewedAt: ren, ExpiresAt: exp, DBNow: now,
		},
	}
	if holder != nil {
		r.Ownership.Holder = *holder
	}
	if l := m.lookup(key, revoked); l != nil {
		l.end(ErrLost)
	}
	m.log.Info("lease revoked", "key", key.String(), "run_id", revoked, "token", token)
	return r, nil
}
