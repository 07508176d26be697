package gcsguard

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/fencekit/fencekit/fence"
)

// point is one collected data point: a sum's value, or a histogram's count
// and maximum.
type point struct {
	name  string
	attrs map[string]string
	value int64
	count uint64
	max   int64
}

func collect(t *testing.T, r *sdkmetric.ManualReader) []point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var out []point
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != "github.com/fencekit/fencekit" {
			t.Errorf("scope %q, want %q", sm.Scope.Name, "github.com/fencekit/fencekit")
		}
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out = append(out, point{name: m.Name, attrs: attrMap(p.Attributes), value: p.Value})
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					mx, _ := p.Max.Value()
					out = append(out, point{name: m.Name, attrs: attrMap(p.Attributes), count: p.Count, max: mx})
				}
			default:
				t.Errorf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return out
}

func attrMap(s attribute.Set) map[string]string {
	m := map[string]string{}
	for _, kv := range s.ToSlice() {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

// find returns the points of name.
func find(pts []point, name string) []point {
	var out []point
	for _, p := range pts {
		if p.name == name {
			out = append(out, p)
		}
	}
	return out
}

// recorder is a slog.Handler keeping every record.
type recorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func (r *recorder) records() []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]slog.Record(nil), r.recs...)
}

func recordAttrs(rec slog.Record) map[string]string {
	m := map[string]string{}
	rec.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	return m
}

// TestGuardMetrics: commits, stale refusals (with their token gap), token
// reuses through every write form, and a conditional write retried after
// another Guard won the race are counted under guard="gcs"; each reuse is
// logged at Error with the key, the token and both runs; a failing write
// callback and bad input count nothing; no attribute names a key or a run.
func TestGuardMetrics(t *testing.T) {
	ctx := context.Background()
	e := newEmulator(t)
	bucket := e.bucket(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	logs := &recorder{}
	a := e.store(t, bucket, Config{MeterProvider: mp, Logger: slog.New(logs)})
	b := e.store(t, bucket, Config{}) // another process, no metrics
	const key = "doc/secret-name"
	put := func(s *Guard, c fence.Claim, v string) error {
		_, err := s.Put(fence.WithClaim(ctx, c), key, strings.NewReader(v), int64(len(v)), PutOptions{})
		return err
	}

	if err := put(a, fence.Claim{Token: 5, Run: "run-a"}, "a1"); err != nil { // accepted 1
		t.Fatal(err)
	}
	// b writes token 6 between a's read and a's conditional write: a's
	// write meets 412, reads again, decides 7 >= 6 and retries.
	var once sync.Once
	a.afterRead = func(string) {
		once.Do(func() {
			if err := put(b, fence.Claim{Token: 6}, "b1"); err != nil {
				t.Error(err)
			}
		})
	}
	if err := put(a, fence.Claim{Token: 7}, "a2"); err != nil { // accepted 2, retry 1
		t.Fatal(err)
	}
	a.afterRead = nil
	if err := put(a, fence.Claim{Token: 3}, "old"); !errors.Is(err, fence.ErrStale) { // stale, gap 4
		t.Fatalf("token 3: %v, want stale", err)
	}
	if err := put(a, fence.Claim{Token: 8, Run: "run-a"}, "a3"); err != nil { // accepted 3
		t.Fatal(err)
	}
	reuse := fence.Claim{Token: 8, Run: "run-b"}
	if err := put(a, reuse, "b2"); !errors.Is(err, fence.ErrTokenReused) {
		t.Fatalf("put: %v, want reuse", err)
	}
	if _, err := a.Delete(fence.WithClaim(ctx, reuse), key); !errors.Is(err, fence.ErrTokenReused) {
		t.Fatalf("delete: %v, want reuse", err)
	}
	if err := a.Do(fence.WithClaim(ctx, reuse), key, func(context.Context) error { return nil }); !errors.Is(err, fence.ErrTokenReused) {
		t.Fatalf("do: %v, want reuse", err)
	}
	// Neither a failing callback nor bad input is a decision.
	injected := errors.New("injected")
	if err := a.Fence(ctx, key, 9, func(context.Context) error { return injected }); !errors.Is(err, injected) {
		t.Fatalf("failing callback: %v", err)
	}
	if err := put(a, fence.Claim{Token: 0}, "x"); !errors.Is(err, fence.ErrInvalidToken) {
		t.Fatalf("token 0: %v", err)
	}

	pts := collect(t, reader)
	want := map[string]int64{
		"fencekit.guard.accepted":    3,
		"fencekit.guard.stale":       1,
		"fencekit.guard.reused":      3,
		"fencekit.guard.gcs.retries": 1,
	}
	for name, v := range want {
		got := find(pts, name)
		if len(got) != 1 || got[0].value != v || len(got[0].attrs) != 1 || got[0].attrs["guard"] != "gcs" {
			t.Errorf("%s: %+v, want one point %d with guard=gcs only", name, got, v)
		}
	}
	gap := find(pts, "fencekit.guard.token_gap")
	if len(gap) != 1 || gap[0].count != 1 || gap[0].max != 4 || gap[0].attrs["guard"] != "gcs" {
		t.Errorf("token_gap: %+v, want one rejection with gap 7-3=4", gap)
	}
	for _, p := range pts {
		for _, v := range p.attrs {
			if v == key || strings.HasPrefix(v, "run-") {
				t.Errorf("%s carries %q", p.name, v)
			}
		}
	}

	var errs []slog.Record
	for _, r := range logs.records() {
		if r.Level >= slog.LevelError {
			errs = append(errs, r)
		}
	}
	if len(errs) != 3 {
		t.Fatalf("%d Error records, want one per reuse (3): %v", len(errs), errs)
	}
	for _, r := range errs {
		got := recordAttrs(r)
		wantAttrs := map[string]string{"resource": key, "token": "8", "run": "run-b", "mark_run": "run-a"}
		for k, v := range wantAttrs {
			if got[k] != v {
				t.Errorf("record %q: %s=%q, want %q", r.Message, k, got[k], v)
			}
		}
		if !strings.Contains(r.Message, "reused") {
			t.Errorf("message %q does not say reused", r.Message)
		}
	}
}
