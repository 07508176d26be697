package leaseops

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/fencekit/fencekit/lease"
)

// HealthReport is the JSON document HealthHandler serves.
type HealthReport struct {
	// Ready is lease.Health.Ready; the status code says the same (200 or
	// 503).
	Ready    bool     `json:"ready"`
	Problems []string `json:"problems,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	// Listener is the listener's state ("delivering", "not-delivering",
	// …) and ListenerDedicated whether lease.Config.ListenConnString is set.
	Listener          string `json:"listener"`
	ListenerDedicated bool   `json:"listener_dedicated"`
	ProbesLost        int64  `json:"probes_lost"`
	Leases            int    `json:"leases"`
	// RenewalAgeSeconds is the time since the last complete renewal round.
	RenewalAgeSeconds float64 `json:"renewal_age_seconds"`
	NodeUnchecked     bool    `json:"node_unchecked"`
	// RefusedSince is when grants started being refused (absent when they
	// are not), and Refused how many since.
	RefusedSince   *time.Time `json:"refused_since,omitempty"`
	Refused        int64      `json:"refused,omitempty"`
	SchemaMigrated bool       `json:"schema_migrated"`
}

// HealthHandler serves m.Health for readiness probes (GET and HEAD only;
// 405 otherwise): 200 when the Manager can grant and keep leases
// (lease.Health.Ready), 503 otherwise, with a HealthReport as JSON:
//
//	{"ready":false,"problems":["grants refused: token floor not checked on node …"],
//	 "listener":"delivering","listener_dedicated":false,"probes_lost":0,"leases":3,
//	 "renewal_age_seconds":0.4,"node_unchecked":true,"refused_since":"…","refused":57,
//	 "schema_migrated":true}
//
// A listener that receives no notifications is a warning, not a problem:
// the Manager still works, polling every lease.Config.FallbackPoll, so the
// probe stays 200 and "warnings" says why latency is higher. Each request
// runs Health's two read-only statements, bounded by timeout (0: 2s) and by
// the request's context. The document carries no account, session or run
// id; mount it where probes reach it.
func HealthHandler(m *lease.Manager, timeout time.Duration) http.Handler {
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		h := m.Health(ctx)
		rep := HealthReport{
			Ready: h.Ready, Problems: h.Problems, Warnings: h.Warnings,
			Listener: h.Listener.String(), ListenerDedicated: h.ListenerDedicated, ProbesLost: h.ProbesLost,
			Leases: h.Leases, RenewalAgeSeconds: h.RenewalAge.Seconds(),
			NodeUnchecked: h.NodeUnchecked, Refused: h.Refused, SchemaMigrated: h.SchemaMigrated,
		}
		if !h.RefusedSince.IsZero() {
			rs := h.RefusedSince
			rep.RefusedSince = &rs
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		code := http.StatusOK
		if !h.Ready {
			code = http.StatusServiceUnavailable
		}
		w.WriteHeader(code)
		if r.Method == http.MethodGet {
			_ = json.NewEncoder(w).Encode(rep)
		}
	})
}
