package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease/internal/leasemetrics"
)

// Lease is one held grant: a run_id, its fencing token and a context that
// is cancelled, with a cause, when ownership is lost or given up:
//
//   - ErrLost: a renewal was rejected by the database;
//   - ErrTrustExpired: the local trust deadline passed without a successful
//     renewal (the database may be unreachable; no reply is needed);
//   - ErrTakenOver: another run took the key over (Manager.Takeover);
//   - ErrReleased: Release was called;
//   - ErrParked: Park was called (the grant waits in the database for
//     Manager.Resume);
//   - ErrClosed: the Manager was closed.
//
// Its methods are safe for concurrent use.
type Lease struct {
	m      *Manager
	key    Key
	runID  uuid.UUID
	token  fence.Token
	holder string
	ctx    context.Context
	cancel context.CancelCauseFunc
	ep     *epoch // the epoch the grant named (renewal.grantEpoch); nil per-lease

	// The renewal mode (renewalmode.go) keeps the deadlines: expires and trust
	// are the lease's own (per-lease mode), or its epoch's frozen when it
	// ended (heartbeat mode: renewal.freeze); due, timer, inflight and
	// failed are per-lease mode's only.
	mu       sync.Mutex
	expires  time.Time   // database expiry after the last grant or renewal
	trust    time.Time   // monotonic trust deadline
	due      time.Time   // next background renewal
	timer    *time.Timer // fires at trust
	done     bool
	inflight bool // a background renewal is in flight
	failed   bool // a renewal statement failed since the last success
	parking  bool // Park took it out of the Manager; Park ends it (lose)
	endedAt  time.Time
	cause    string // metric cause of a loss, "" otherwise
}

// newLease registers a granted lease; nil if the Manager closed meanwhile.
// The lease's context keeps the values of parent (the caller's ctx) but not
// its cancellation or deadline, and carries the claim (token and run_id).
// ep is the epoch the grant named; the renewal mode sets the lease up
// (renewal.attach).
func (m *Manager) newLease(parent context.Context, key Key, runID uuid.UUID, token fence.Token, holder string, expires, sentAt time.Time, ep *epoch) *Lease {
	claim := fence.Claim{Token: token, Run: runID.String(), Scope: key.Scope()}
	parent = m.outerContext(parent) // the caller's span, not the Manager's (trace.go)
	ctx, cancel := context.WithCancelCause(fence.WithClaim(context.WithoutCancel(parent), claim))
	l := &Lease{m: m, key: key, runID: runID, token: token, holder: holder, ctx: ctx, cancel: cancel, ep: ep}
	m.mu.Lock()
	if m.closed.Load() {
		m.mu.Unlock()
		l.stop()
		cancel(ErrClosed)
		return nil
	}
	renewalEnded := m.ren.attach(l, expires, sentAt)
	// A takeover or revocation of this run reported while its grant's
	// reply was in flight (leaseOrGrant): the run ends at once.
	ended := m.granting[runID]
	m.leases[runID] = l
	m.mu.Unlock()
	if ended != nil {
		l.end(ended)
	} else if renewalEnded != nil {
		l.end(renewalEnded)
	}
	m.startListener() // tells the holder of a takeover
	return l
}

// claim is the lease's token and run identity, as its context carries them.
func (l *Lease) claim() fence.Claim {
	c, _ := fence.ClaimFromContext(l.ctx)
	return c
}

// Holder is the grant's holder label (WithHolder), "" when none.
func (l *Lease) Holder() string { return l.holder }

// Key is the lease's key.
func (l *Lease) Key() Key { return l.key }

// RunID identifies this execution. It distinguishes runs; it does not order
// them (the Token does).
func (l *Lease) RunID() uuid.UUID { return l.runID }

// Token is the fencing token of this grant: larger than every earlier
// grant's token for the same key. Present it to guards.
func (l *Lease) Token() fence.Token { return l.token }

// ExpiresAt is the database's expiry after the last grant or renewal. It is
// informational: local decisions use TrustDeadline.
//
// In heartbeat mode it is the heartbeat's expiry after its last renewal.
func (l *Lease) ExpiresAt() time.Time {
	_, exp := l.deadlines()
	return exp
}

// deadlines returns the lease's trust deadline and database expiry.
func (l *Lease) deadlines() (trust, expires time.Time) { return l.m.ren.deadlines(l) }

// Context is cancelled when the lease is lost, released or its Manager
// closed; context.Cause tells which. It carries the values of the ctx given
// to Acquire (not its cancellation or deadline: that ctx bounds the call
// only) and the claim fence.Claim{Token, Run: RunID().String(), Scope:
// Key().Scope()} (fence.ClaimFromContext, fence.FromContext).
func (l *Lease) Context() context.Context { return l.ctx }

// whenEnded calls f with the lease's cause once it ends, in a goroutine of
// its own; the returned stop prevents that if it has not run yet.
func (l *Lease) whenEnded(f func(cause error)) (stop func() bool) {
	return context.AfterFunc(l.ctx, func() { f(context.Cause(l.ctx)) })
}

// Done is closed when Context is cancelled.
func (l *Lease) Done() <-chan struct{} { return l.ctx.Done() }

// Err is nil while the lease is held, else the cause (ErrLost,
// ErrTrustExpired, ErrTakenOver, ErrReleased, ErrParked or ErrClosed).
func (l *Lease) Err() error {
	if l.ctx.Err() == nil {
		return nil
	}
	return context.Cause(l.ctx)
}

// TrustDeadline is sent_at + TTL − SafetyMargin of the last successful grant
// or renewal, on the local monotonic clock; in heartbeat mode, of the
// last successful heartbeat (shared by every lease of the Manager).
func (l *Lease) TrustDeadline() time.Time {
	trust, _ := l.deadlines()
	return trust
}

// Remaining is the time left until TrustDeadline (0 once passed or lost).
// Check it before starting work that cannot be fenced.
func (l *Lease) Remaining() time.Duration {
	if l.ctx.Err() != nil {
		return 0
	}
	return max(time.Until(l.TrustDeadline()), 0)
}

// Renew renews the lease now, in one statement, like Manager.Renew. On
// success the trust deadline moves to sent_at + TTL − SafetyMargin. When
// the database refuses, the error matches ErrLost and the lease's context
// is cancelled with ErrLost, or with ErrTakenOver (which the error then
// matches too) when a Takeover displaced the run. Other errors
// (timeouts, network) change nothing: the trust timer still fires on time,
// and a retry reports the true state. Renewing a lease that has ended
// returns its cause.
//
// In heartbeat mode it renews the Manager's heartbeat now (which extends
// every lease of the Manager) and then checks, in one more statement, that
// the run still holds its row.
func (l *Lease) Renew(ctx context.Context) (Renewal, error) {
	if err := l.Err(); err != nil {
		return Renewal{}, err
	}
	ctx, sp := l.m.startSpan(ctx, spanRenew, l.key)
	sp.run(l.runID, int64(l.token))
	r, err := l.m.ren.renew(ctx, l)
	sp.endRenew(r, err)
	return r, err
}

// Release cancels the lease's context (cause ErrReleased) and then releases
// it in the database; see Manager.Release for the results. Release after
// loss is allowed and harmless: it matches this run_id only.
//
// Release after Park sends nothing and returns an error matching ErrParked:
// the grant lives on in the database for Resume (a deferred Release does
// not undo a park). Manager.Release(ctx, Key(), RunID()) releases a parked
// grant.
func (l *Lease) Release(ctx context.Context) (ReleaseResult, error) {
	if errors.Is(l.Err(), ErrParked) {
		return 0, fmt.Errorf("lease: release %s run %s: %w (Manager.Release releases a parked grant)", l.key, l.runID, ErrParked)
	}
	ctx, sp := l.m.startSpan(ctx, spanRelease, l.key)
	sp.run(l.runID, int64(l.token))
	l.end(ErrReleased)
	res, err := l.m.release(ctx, l.key, l.runID)
	if err != nil {
		l.m.ren.unconfirmed(l.key, l.runID, l.ep)
	}
	sp.endRelease(res, err)
	return res, err
}

// extend applies a successful renewal. sentAt, when non-zero, also sets the
// next background renewal. A stale reply never shortens the deadline.
func (l *Lease) extend(sentAt, trust, expires time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !sentAt.IsZero() {
		l.inflight = false
		l.due = sentAt.Add(l.m.cfg.RenewEvery)
	}
	if l.done {
		return
	}
	l.failed = false
	if trust.After(l.trust) {
		l.trust = trust
		l.expires = expires
		l.timer.Reset(time.Until(trust))
	}
}

// renewFailed notes that a renewal statement for the lease failed.
func (l *Lease) renewFailed() {
	l.mu.Lock()
	l.failed = true
	l.mu.Unlock()
}

// ended returns when the lease's context was cancelled and the metric cause
// of its loss ("" when it was released or is still held).
func (l *Lease) ended() (time.Time, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.endedAt, l.cause
}

// retryAt reschedules a background renewal that failed.
func (l *Lease) retryAt(t time.Time) {
	l.mu.Lock()
	l.inflight = false
	l.due = t
	l.mu.Unlock()
}

func (l *Lease) onTrustTimer() {
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		return
	}
	if d := time.Until(l.trust); d > 0 { // extended after the timer fired
		l.timer.Reset(d)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.end(ErrTrustExpired)
}

// lose ends the lease with cause after the database refused its renewal,
// unless Park is parking it: a renewal sent before the park and refused
// after it (renewals exclude parked rows) is no loss, and Park ends the
// lease with the park's outcome.
func (l *Lease) lose(cause error) {
	l.mu.Lock()
	parking := l.parking
	l.mu.Unlock()
	if !parking {
		l.end(cause)
	}
}

// end cancels the lease with cause and unregisters it; false if it had
// already ended.
func (l *Lease) end(cause error) bool { return l.endLogged(cause, true) }

// endLogged is end; logWarn false leaves the per-lease Warn record to
// Debug, for a heartbeat that ends every lease of a Manager at once (it
// logs one Warn with the count instead of one per lease).
func (l *Lease) endLogged(cause error, logWarn bool) bool {
	detected := time.Now()
	if !l.stop() {
		// Another path is ending it: wait until it has (cause recorded,
		// context cancelled), so that a caller who returns after end
		// (Takeover of its own Manager's lease) leaves it ended. That path
		// holds no lock its caller may hold while it gets there.
		<-l.ctx.Done()
		return false
	}
	// The cause and time of the end are recorded before the context is
	// cancelled, so that whoever wakes on Done (Run's overrun metric) reads
	// them.
	failed := l.m.ren.failed(l)
	l.mu.Lock()
	var mcause string
	switch {
	case errors.Is(cause, ErrReleased), errors.Is(cause, ErrParked): // the holder's choice, not a loss
	case errors.Is(cause, ErrTakenOver):
		mcause = leasemetrics.CauseTakenOver
	case errors.Is(cause, ErrTrustExpired):
		mcause = leasemetrics.CauseTrustDeadline
		if failed {
			mcause = leasemetrics.CauseDatabaseError
		}
	default:
		mcause = leasemetrics.CauseRenewalRejected
	}
	l.cause = mcause
	l.endedAt = time.Now()
	trust := l.trust
	l.mu.Unlock()
	l.cancel(cause)
	cancelled := time.Now()
	l.m.remove(l)
	l.m.met.onHeld(l.ctx, -1)
	if mcause != "" {
		delay := cancelled.Sub(detected)
		if errors.Is(cause, ErrTrustExpired) {
			delay = cancelled.Sub(trust)
		}
		l.m.observe(event{kind: evLost, key: l.key})
		l.m.traceLost(l, mcause, cause, cancelled.Add(-delay), cancelled)
		l.m.met.onLost(l.ctx, mcause, delay)
		level := slog.LevelWarn
		if !logWarn {
			level = slog.LevelDebug
		}
		if l.m.log.Enabled(l.ctx, level) {
			l.m.log.Log(l.ctx, level, "lease lost", "key", l.key.String(), "run_id", l.runID, "token", int64(l.token),
				"cause", mcause, "err", cause.Error(), "cancel_delay", delay)
		}
	}
	return true
}

// stop marks the lease done and stops its timer; false if already done.
func (l *Lease) stop() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return false
	}
	l.m.ren.freeze(l)
	l.done = true
	if l.timer != nil {
		l.timer.Stop()
	}
	return true
}

// String describes the lease for logs.
func (l *Lease) String() string {
	return fmt.Sprintf("lease %s run %s token %d", l.key, l.runID, l.token)
}
