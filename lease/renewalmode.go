package lease

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// renewal is how a Manager keeps its leases alive: by one heartbeat per
// Manager (heartbeatRenewal, heartbeat.go; the default) or lease by lease
// (perLeaseRenewal, perlease.go). New chooses one, once (newRenewal); the
// core (acquire, takeover, release, renew, lease) calls it at these fixed
// points and never asks which mode it runs in. The *epoch a grant names
// is opaque to the core: nil in per-lease mode.
type renewal interface {
	// start starts the mode's background goroutines (counted in m.wg).
	start()
	// grantEpoch is called before a grant statement: the epoch the grant
	// is to name (its parameter is epochID), live with at least
	// CallTimeout of trust left.
	grantEpoch(ctx context.Context) (*epoch, error)
	// grantGone is called after a grant statement naming ep granted
	// nothing although the key is not held: whether that is because ep is
	// over (a new one may grant at once).
	grantGone(ctx context.Context, ep *epoch) bool
	// attach sets up the lease being registered (m.mu held, before it
	// joins m.leases) from its grant's database expiry and sent_at; a
	// non-nil result is the cause to end it with at once.
	attach(l *Lease, expires, sentAt time.Time) error
	// detach is called when the lease leaves m.leases (m.mu held).
	detach(l *Lease)
	// deadlines returns the lease's trust deadline and database expiry.
	deadlines(l *Lease) (trust, expires time.Time)
	// failed reports whether a renewal statement for the lease failed since
	// the last success (a trust-deadline loss is then blamed on the
	// database).
	failed(l *Lease) bool
	// freeze records the lease's final deadlines as it ends (l.mu held).
	freeze(l *Lease)
	// renew renews the held lease l now (Lease.Renew, Manager.Renew): on
	// success its trust deadline moves; a refusal ends it.
	renew(ctx context.Context, l *Lease) (Renewal, error)
	// unconfirmed is called when the release of (key, run), a run granted
	// under ep, failed: the row's end is then up to the mode (TTL expiry,
	// or retried releases).
	unconfirmed(key Key, run uuid.UUID, ep *epoch)
	// unparked is called when the park of (key, run), a run under ep,
	// has an unknown outcome (or a resume's whose row may now be ep's):
	// the row may still be this Manager's, so the mode parks it again for
	// idle (heartbeat: retried like a release, unreleased.go) or lets it
	// expire by TTL (per-lease).
	unparked(key Key, run uuid.UUID, ep *epoch, idle time.Duration)
	// takeUnconfirmed hands over the runs whose release is not confirmed,
	// for Close to release with the held ones (m.mu held).
	takeUnconfirmed() []unreleased
	// catchUp ends the leases a takeover displaced or Revoke revoked while
	// notifications may have been missed: the listener calls it each time
	// its LISTEN is in place, on its own connection (q).
	catchUp(ctx context.Context, q querier)
	// fallback is the leases' part of the listener's polling fallback
	// (notifications not delivered), run every FallbackPoll.
	fallback(ctx context.Context)
	// close ends what the mode holds in the database at Close, after the
	// leases were ended and released.
	close(ctx context.Context) error
}

// newRenewal returns the renewal mode cfg chose.
func newRenewal(m *Manager) renewal {
	if m.cfg.Renewal == RenewalPerLease {
		return perLeaseRenewal{m: m}
	}
	return newHeartbeatRenewal(m)
}
