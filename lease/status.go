package lease

import (
	"cmp"
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/fencekit/fencekit/fence"
)

// HeldLease describes one lease a Manager holds, as seen locally.
type HeldLease struct {
	Key   Key
	RunID uuid.UUID
	Token fence.Token
	// TrustDeadline is the local monotonic trust deadline (sent_at + TTL −
	// SafetyMargin of the last grant or renewal).
	TrustDeadline time.Time
	// Remaining is TrustDeadline minus now (0 once passed).
	Remaining time.Duration
	// ExpiresAt is the database's expiry after the last grant or renewal
	// (database clock, informational).
	ExpiresAt time.Time
}

// StatusLease is one lease in a StatusReport.
type StatusLease struct {
	AccountID        string    `json:"account_id"`
	SessionID        string    `json:"session_id"`
	RunID            uuid.UUID `json:"run_id"`
	Token            int64     `json:"token"`
	ExpiresAt        time.Time `json:"expires_at"`
	RemainingSeconds float64   `json:"remaining_seconds"`
}

// Held lists the leases this Manager holds now (not ended), sorted by key,
// with their remaining trust. It reads local state only and sends nothing;
// Inspect asks the database.
func (m *Manager) Held() []HeldLease {
	m.mu.Lock()
	ls := make([]*Lease, 0, len(m.leases))
	for _, l := range m.leases {
		ls = append(ls, l)
	}
	m.mu.Unlock()
	now := time.Now()
	out := make([]HeldLease, 0, len(ls))
	for _, l := range ls {
		l.mu.Lock()
		done, trust, exp := l.done, l.trust, l.expires
		l.mu.Unlock()
		if done {
			continue
		}
		rem := max(trust.Sub(now), 0)
		out = append(out, HeldLease{
			Key: l.key, RunID: l.runID, Token: l.token,
			TrustDeadline: trust, Remaining: rem, ExpiresAt: exp,
		})
	}
	slices.SortFunc(out, func(a, b HeldLease) int {
		return cmp.Or(cmp.Compare(a.Key.AccountID, b.Key.AccountID), cmp.Compare(a.Key.SessionID, b.Key.SessionID))
	})
	return out
}

// StatusReport is the JSON document StatusHandler serves.
type StatusReport struct {
	TTLSeconds         float64       `json:"ttl_seconds"`
	TrustWindowSeconds float64       `json:"trust_window_seconds"`
	Leases             []StatusLease `json:"leases"`
}

// StatusHandler serves Held as JSON (GET and HEAD only; 405 otherwise):
//
//	{"ttl_seconds":15,"trust_window_seconds":12,"leases":[{"account_id":"a",
//	 "session_id":"s","run_id":"…","token":42,"expires_at":"…","remaining_seconds":9.7}]}
//
// The document names account and session ids: mount it on an operator
// port or behind authentication, never on the public API.
func (m *Manager) StatusHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		held := m.Held()
		rep := StatusReport{
			TTLSeconds:         m.cfg.TTL.Seconds(),
			TrustWindowSeconds: m.TrustWindow().Seconds(),
			Leases:             make([]StatusLease, len(held)),
		}
		for i, h := range held {
			rep.Leases[i] = StatusLease{
				AccountID: h.Key.AccountID, SessionID: h.Key.SessionID, RunID: h.RunID,
				Token: int64(h.Token), ExpiresAt: h.ExpiresAt, RemainingSeconds: h.Remaining.Seconds(),
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(rep)
	})
}
