package redisguard

import (
	"context"
	"log/slog"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/obs/obstest"
)

// TestMetricsAndReuseLog: decisions are recorded under the shared names
// with guard="redis", and a reuse refusal is logged at Error.
func TestMetricsAndReuseLog(t *testing.T) {
	ctx := context.Background()
	s := newSpace(t)
	m := obstest.NewMeter(t)
	logs, logger := obstest.NewLogs()
	g := s.guard(t, Config{MeterProvider: m.Provider, Logger: logger})
	r := s.resources + "metrics"
	for _, c := range []fence.Claim{{Token: 5, Run: "run-a"}, {Token: 5, Run: "run-a"}, {Token: 3}, {Token: 5, Run: "run-b"}} {
		_ = g.Put(fence.WithClaim(ctx, c), r, []byte("v"))
	}
	pts := m.Collect()
	attr := map[string]string{"guard": "redis"}
	for name, want := range map[string]float64{"fencekit.guard.accepted": 2, "fencekit.guard.stale": 1, "fencekit.guard.reused": 1} {
		if got := obstest.Value(pts, name, attr); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if n := obstest.Count(pts, "fencekit.guard.token_gap", attr); n != 1 {
		t.Errorf("token gap count %d", n)
	}
	recs := logs.AtLeast(slog.LevelError)
	if len(recs) != 1 || recs[0].Message != "redisguard: "+"token reused by a different run; write refused" ||
		recs[0].Attrs["resource"] != r || recs[0].Attrs["mark_run"] != "run-a" || recs[0].Attrs["run"] != "run-b" {
		t.Errorf("reuse log: %+v", recs)
	}
}
