package lease

import (
	"cmp"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/fencekit/fencekit/fence"
)

// LocalLease describes one lease a Manager holds, as seen locally.
type LocalLease struct {
	Key   Key
	RunID uuid.UUID
	Token fence.Token
	// Holder is the grant's holder label (WithHolder), "" when none.
	Holder string
	// TrustDeadline is the local monotonic trust deadline (sent_at + TTL −
	// SafetyMargin of the last grant or renewal; in heartbeat mode of the
	// Manager's last heartbeat).
	TrustDeadline time.Time
	// Remaining is TrustDeadline minus now (0 once passed).
	Remaining time.Duration
	// ExpiresAt is the database's expiry after the last grant or renewal
	// (database clock, informational).
	ExpiresAt time.Time
}

// Leases lists the leases this Manager holds now (not ended), sorted by key,
// with their remaining trust. It reads local state only and sends nothing;
// Inspect asks the database.
func (m *Manager) Leases() []LocalLease {
	m.mu.Lock()
	ls := make([]*Lease, 0, len(m.leases))
	for _, l := range m.leases {
		ls = append(ls, l)
	}
	m.mu.Unlock()
	now := time.Now()
	out := make([]LocalLease, 0, len(ls))
	for _, l := range ls {
		l.mu.Lock()
		done := l.done
		l.mu.Unlock()
		if done {
			continue
		}
		trust, exp := l.deadlines()
		rem := max(trust.Sub(now), 0)
		out = append(out, LocalLease{
			Key: l.key, RunID: l.runID, Token: l.token, Holder: l.holder,
			TrustDeadline: trust, Remaining: rem, ExpiresAt: exp,
		})
	}
	slices.SortFunc(out, func(a, b LocalLease) int {
		return cmp.Or(cmp.Compare(a.Key.AccountID, b.Key.AccountID), cmp.Compare(a.Key.SessionID, b.Key.SessionID))
	})
	return out
}
