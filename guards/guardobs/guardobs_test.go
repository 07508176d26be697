package guardobs_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardobs"
	"github.com/fencekit/fencekit/internal/obs"
	"github.com/fencekit/fencekit/internal/obs/obstest"
)

// descriptor is what a dashboard depends on: name, unit, description and
// the kind of data (with histogram bounds).
type descriptor struct {
	Name, Unit, Description, Kind string
	Bounds                        string
}

func describe(t *testing.T, record func(mp *sdkmetric.MeterProvider)) map[string]descriptor {
	t.Helper()
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	record(mp)
	var rm metricdata.ResourceMetrics
	if err := rd.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]descriptor{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != obs.Scope {
			t.Errorf("scope %q, want the lease's %q", sm.Scope.Name, obs.Scope)
		}
		for _, m := range sm.Metrics {
			d := descriptor{Name: m.Name, Unit: m.Unit, Description: m.Description}
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				d.Kind = "sum"
			case metricdata.Histogram[int64]:
				d.Kind = "histogram"
				for _, p := range data.DataPoints {
					d.Bounds = fmtBounds(p.Bounds)
				}
			default:
				d.Kind = "other"
			}
			out[m.Name] = d
		}
	}
	return out
}

func fmtBounds(b []float64) string {
	s := ""
	for _, v := range b {
		s += " " + slog.Float64Value(v).String()
	}
	return s
}

// TestInstruments pins what a dashboard depends on: the names, units and
// kinds of the instruments a Recorder creates (docs/operations.md lists
// them), and the scope of every guard's meter.
func TestInstruments(t *testing.T) {
	ctx := context.Background()
	stale := &fence.StaleError{Resource: "r", Presented: 3, Highest: 7}
	reused := &fence.ReusedError{Resource: "r", Token: 7, Run: "a", MarkRun: "b"}
	got := describe(t, func(mp *sdkmetric.MeterProvider) {
		r, err := guardobs.New(guardobs.Config{Kind: "s3", MeterProvider: mp,
			Retries: "S3 conditional pointer writes retried after losing a race (412/409)."})
		if err != nil {
			t.Fatal(err)
		}
		r.Decision(ctx, nil)
		r.Decision(ctx, stale)
		r.Decision(ctx, reused)
		r.Retried(ctx, 2)
		h, err := guardobs.NewHousekeeping("s3", mp, nil)
		if err != nil {
			t.Fatal(err)
		}
		h.Deleted(ctx, time.Now(), 1, nil)
	})
	want := map[string]descriptor{
		"fencekit.guard.accepted":      {Unit: "{write}", Kind: "sum"},
		"fencekit.guard.stale":         {Unit: "{write}", Kind: "sum"},
		"fencekit.guard.reused":        {Unit: "{write}", Kind: "sum"},
		"fencekit.guard.token_gap":     {Unit: "{token}", Kind: "histogram", Bounds: fmtBounds(guardobs.TokenGapBounds())},
		"fencekit.guard.s3.retries":    {Unit: "{attempt}", Kind: "sum"},
		"fencekit.guard.marks.deleted": {Unit: "{mark}", Kind: "sum"},
	}
	if len(got) != len(want) {
		t.Errorf("recorded %d instruments, want %d: %v", len(got), len(want), got)
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("%s not recorded", name)
			continue
		}
		if g.Unit != w.Unit || g.Kind != w.Kind || g.Bounds != w.Bounds || g.Description == "" {
			t.Errorf("%s: got %+v, want unit %s kind %s bounds %q and a description", name, g, w.Unit, w.Kind, w.Bounds)
		}
	}
}

func TestDecisionRecordsAndLogs(t *testing.T) {
	ctx := context.Background()
	m := obstest.NewMeter(t)
	logs, logger := obstest.NewLogs()
	r, err := guardobs.New(guardobs.Config{Kind: "etcd", MeterProvider: m.Provider, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	r.Decision(ctx, nil)
	r.Decision(ctx, nil)
	r.Decision(ctx, &fence.StaleError{Resource: "r", Presented: 2, Highest: 12})
	r.Decision(ctx, &fence.ReusedError{Resource: "doc/1", Token: 9, Run: "run-b", MarkRun: "run-a"})
	r.Decision(ctx, fence.ErrBusy)
	r.Decision(ctx, errors.New("store down"))
	r.Retried(ctx, 3) // no retry counter configured: nothing
	pts := m.Collect()
	attr := map[string]string{"guard": "etcd"}
	if v := obstest.Value(pts, "fencekit.guard.accepted", attr); v != 2 {
		t.Errorf("accepted %v, want 2", v)
	}
	if v := obstest.Value(pts, "fencekit.guard.stale", attr); v != 1 {
		t.Errorf("stale %v, want 1", v)
	}
	if p := obstest.Find(pts, "fencekit.guard.token_gap", attr); len(p) != 1 || p[0].Sum != 10 {
		t.Errorf("token gap %+v, want one point summing 10", p)
	}
	if v := obstest.Value(pts, "fencekit.guard.reused", attr); v != 1 {
		t.Errorf("reused %v, want 1", v)
	}
	if p := obstest.Find(pts, guardobs.RetriesName("etcd"), nil); len(p) != 0 {
		t.Errorf("retries recorded without Config.Retries: %+v", p)
	}
	recs := logs.AtLeast(slog.LevelError)
	if len(recs) != 1 {
		t.Fatalf("%d error records, want 1: %+v", len(recs), recs)
	}
	want := map[string]string{"resource": "doc/1", "token": "9", "run": "run-b", "mark_run": "run-a"}
	if recs[0].Message != "etcdguard: "+"token reused by a different run; write refused" {
		t.Errorf("message %q", recs[0].Message)
	}
	for k, v := range want {
		if recs[0].Attrs[k] != v {
			t.Errorf("field %s = %q, want %q", k, recs[0].Attrs[k], v)
		}
	}
}

func TestNilRecorderAndBadConfig(t *testing.T) {
	var r *guardobs.Recorder
	r.Decision(context.Background(), nil)
	r.Retried(context.Background(), 1)
	r.Reused(context.Background(), &fence.ReusedError{})
	for _, kind := range []string{"", "Redis", "has space", "a-b", "x123456789012345678901234567890123"} {
		if _, err := guardobs.New(guardobs.Config{Kind: kind}); !errors.Is(err, fence.ErrInvalidConfig) {
			t.Errorf("Kind %q: %v, want fence.ErrInvalidConfig", kind, err)
		}
	}
}

// TokenGapBounds hands out a copy: changing what it returned does not
// change the boundaries a later Recorder uses.
func TestTokenGapBoundsIsACopy(t *testing.T) {
	b := guardobs.TokenGapBounds()
	if len(b) == 0 || b[0] != 1 {
		t.Fatalf("TokenGapBounds() = %v, want boundaries starting at 1", b)
	}
	b[0] = 42
	if again := guardobs.TokenGapBounds(); again[0] != 1 {
		t.Fatalf("after changing a returned slice, TokenGapBounds()[0] = %v, want 1", again[0])
	}
}
