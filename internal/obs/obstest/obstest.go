// Package obstest collects OpenTelemetry metrics and slog records in tests.
// It uses the OpenTelemetry SDK with a ManualReader; production code never
// imports it.
package obstest

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Meter is an SDK MeterProvider with a manual reader.
type Meter struct {
	Provider *sdkmetric.MeterProvider
	reader   *sdkmetric.ManualReader
	t        testing.TB
}

// NewMeter returns a Meter shut down at cleanup.
func NewMeter(t testing.TB) *Meter {
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return &Meter{Provider: mp, reader: r, t: t}
}

// Point is one data point flattened: the instrument, its attributes, and
// its value (Sum and Gauge: the value; Histogram: Count, Sum, Min, Max).
type Point struct {
	Name  string
	Attrs map[string]string
	Value float64 // sums and gauges
	Count uint64  // histograms
	Sum   float64 // histograms
	Min   float64 // histograms (when recorded)
	Max   float64 // histograms (when recorded)
	Hist  bool
}

// Collect reads every data point now.
func (m *Meter) Collect() []Point {
	m.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		m.t.Fatalf("collect metrics: %v", err)
	}
	var out []Point
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			switch d := mt.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out = append(out, Point{Name: mt.Name, Attrs: attrMap(p.Attributes.ToSlice()), Value: float64(p.Value)})
				}
			case metricdata.Sum[float64]:
				for _, p := range d.DataPoints {
					out = append(out, Point{Name: mt.Name, Attrs: attrMap(p.Attributes.ToSlice()), Value: p.Value})
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out = append(out, Point{Name: mt.Name, Attrs: attrMap(p.Attributes.ToSlice()), Value: float64(p.Value)})
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					out = append(out, Point{Name: mt.Name, Attrs: attrMap(p.Attributes.ToSlice()), Value: p.Value})
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					pt := Point{Name: mt.Name, Attrs: attrMap(p.Attributes.ToSlice()), Count: p.Count, Sum: p.Sum, Hist: true}
					if v, ok := p.Min.Value(); ok {
						pt.Min = v
					}
					if v, ok := p.Max.Value(); ok {
						pt.Max = v
					}
					out = append(out, pt)
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					pt := Point{Name: mt.Name, Attrs: attrMap(p.Attributes.ToSlice()), Count: p.Count, Sum: float64(p.Sum), Hist: true}
					if v, ok := p.Min.Value(); ok {
						pt.Min = float64(v)
					}
					if v, ok := p.Max.Value(); ok {
						pt.Max = float64(v)
					}
					out = append(out, pt)
				}
			default:
				m.t.Fatalf("metric %s: unexpected data type %T", mt.Name, mt.Data)
			}
		}
	}
	return out
}

func attrMap(kvs []attribute.KeyValue) map[string]string {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		out[string(kv.Key)] = kv.Value.String()
	}
	return out
}

// Find returns the points of name whose attributes include want.
func Find(points []Point, name string, want map[string]string) []Point {
	var out []Point
	for _, p := range points {
		if p.Name != name {
			continue
		}
		ok := true
		for k, v := range want {
			if p.Attrs[k] != v {
				ok = false
			}
		}
		if ok {
			out = append(out, p)
		}
	}
	return out
}

// Value sums the values of the matching sum/gauge points (0 when none).
func Value(points []Point, name string, want map[string]string) float64 {
	var v float64
	for _, p := range Find(points, name, want) {
		v += p.Value
	}
	return v
}

// Count sums the counts of the matching histogram points.
func Count(points []Point, name string, want map[string]string) uint64 {
	var n uint64
	for _, p := range Find(points, name, want) {
		n += p.Count
	}
	return n
}

// Record is one captured log record.
type Record struct {
	Level   slog.Level
	Message string
	Attrs   map[string]string
}

// Logs is a slog.Handler that keeps every record (all levels enabled).
type Logs struct {
	mu      sync.Mutex
	records []Record
	attrs   []slog.Attr
}

// NewLogs returns a capturing handler and a logger writing to it.
func NewLogs() (*Logs, *slog.Logger) {
	h := &Logs{}
	return h, slog.New(h)
}

// Enabled implements slog.Handler: every level.
func (h *Logs) Enabled(context.Context, slog.Level) bool { return true }

// Handle implements slog.Handler.
func (h *Logs) Handle(_ context.Context, r slog.Record) error {
	rec := Record{Level: r.Level, Message: r.Message, Attrs: map[string]string{}}
	for _, a := range h.attrs {
		rec.Attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.Attrs[a.Key] = a.Value.Resolve().String()
		return true
	})
	h.mu.Lock()
	h.records = append(h.records, rec)
	h.mu.Unlock()
	return nil
}

// WithAttrs implements slog.Handler (records share the parent's store).
func (h *Logs) WithAttrs(as []slog.Attr) slog.Handler {
	return &logsView{Logs: h, attrs: slices.Clone(as)}
}

// WithGroup implements slog.Handler; groups are flattened.
func (h *Logs) WithGroup(string) slog.Handler { return h }

type logsView struct {
	*Logs
	attrs []slog.Attr
}

func (v *logsView) Handle(ctx context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(v.attrs...)
	return v.Logs.Handle(ctx, r)
}

// Records returns a copy of the records so far.
func (h *Logs) Records() []Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.records)
}

// AtLeast returns the records at level or above.
func (h *Logs) AtLeast(level slog.Level) []Record {
	var out []Record
	for _, r := range h.Records() {
		if r.Level >= level {
			out = append(out, r)
		}
	}
	return out
}

// Messages returns the records with message msg.
func (h *Logs) Messages(msg string) []Record {
	var out []Record
	for _, r := range h.Records() {
		if r.Message == msg {
			out = append(out, r)
		}
	}
	return out
}
