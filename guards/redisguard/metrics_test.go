package redisguard

import (
	"context"
	"log/slog"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardobs"
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
	attr := map[string]string{guardobs.AttrGuard: guardobs.KindRedis}
	for name, want := range map[string]float64{guardobs.MetricAccepted: 2, guardobs.MetricStale: 1, guardobs.MetricReused: 1} {
		if got := obstest.Value(pts, name, attr); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if n := obstest.Count(pts, guardobs.MetricTokenGap, attr); n != 1 {
		t.Errorf("token gap count %d", n)
	}
	recs := logs.AtLeast(slog.LevelError)
	if len(recs) != 1 || recs[0].Message != "redisguard: "+guardobs.MsgReused ||
		recs[0].Attrs[guardobs.FieldResource] != r || recs[0].Attrs[guardobs.FieldMarkRun] != "run-a" || recs[0].Attrs[guardobs.FieldRun] != "run-b" {
		t.Errorf("reuse log: %+v", recs)
	}
}
