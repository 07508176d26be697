package leaseops

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/fencekit/fencekit/lease"
)

// StatusEntry is one lease in a StatusReport.
type StatusEntry struct {
	AccountID        string    `json:"account_id"`
	SessionID        string    `json:"session_id"`
	RunID            uuid.UUID `json:"run_id"`
	Token            int64     `json:"token"`
	Holder           string    `json:"holder,omitempty"`
	ExpiresAt        time.Time `json:"expires_at"`
	RemainingSeconds float64   `json:"remaining_seconds"`
}

// StatusReport is the JSON document StatusHandler serves.
type StatusReport struct {
	TTLSeconds         float64       `json:"ttl_seconds"`
	TrustWindowSeconds float64       `json:"trust_window_seconds"`
	Leases             []StatusEntry `json:"leases"`
}

// StatusHandler serves m.Leases() as JSON (GET and HEAD only; 405 otherwise):
//
//	{"ttl_seconds":15,"trust_window_seconds":12,"leases":[{"account_id":"a",
//	 "session_id":"s","run_id":"…","token":42,"holder":"desktop","expires_at":"…",
//	 "remaining_seconds":9.7}]}
//
// holder is omitted for grants without a label.
//
// The document names account and session ids: mount it on an operator
// port or behind authentication, never on the public API.
func StatusHandler(m *lease.Manager) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		held := m.Leases()
		rep := StatusReport{
			TTLSeconds:         m.TTL().Seconds(),
			TrustWindowSeconds: m.TrustWindow().Seconds(),
			Leases:             make([]StatusEntry, len(held)),
		}
		for i, h := range held {
			rep.Leases[i] = StatusEntry{
				AccountID: h.Key.AccountID, SessionID: h.Key.SessionID, RunID: h.RunID,
				Token: int64(h.Token), Holder: h.Holder, ExpiresAt: h.ExpiresAt, RemainingSeconds: h.Remaining.Seconds(),
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(rep)
	})
}
