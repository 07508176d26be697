package bench

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"
)

func TestMetricLinesRoundTrip(t *testing.T) {
	in := []Metric{
		{Key: "a_ratio", Value: 1.04, Unit: "x", Target: 1.05, Cmp: AtMost, Note: "n", Spread: &Spread{Min: 0.9, Median: 1.04, Max: math.NaN(), N: 10}},
		{Key: "b_us", Value: math.NaN(), Note: "failed"},
	}
	var buf bytes.Buffer
	if err := WriteMetricLines(&buf, in); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), "\n"); n != 2 {
		t.Fatalf("%d lines: %q", n, buf.String())
	}
	out, err := ReadMetricLines(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || out[0].Key != "a_ratio" || out[0].Value != 1.04 || out[0].Cmp != AtMost || out[0].Target != 1.05 ||
		out[0].Spread == nil || out[0].Spread.Min != 0.9 || !math.IsNaN(out[0].Spread.Max) || out[0].Spread.N != 10 {
		t.Fatalf("first metric %+v %+v", out[0], out[0].Spread)
	}
	if !math.IsNaN(out[1].Value) || out[1].Note != "failed" {
		t.Fatalf("second metric %+v", out[1])
	}
	if _, err := ReadMetricLines(strings.NewReader("{not json\n")); err == nil {
		t.Fatal("garbage line accepted")
	}
}

// TestFileGuardCase runs the file guard case quickly: it reports both keys
// with a finite ratio.
func TestFileGuardCase(t *testing.T) {
	e := &Env{Ctx: context.Background(), Quick: true, Report: &Report{}}
	if err := FileGuard(e); err != nil {
		t.Fatal(err)
	}
	for _, k := range FileGuardKeys {
		m, ok := e.Report.Get(k)
		if !ok || math.IsNaN(m.Value) || m.Value <= 0 {
			t.Errorf("%s: %+v", k, m)
		}
	}
	m, _ := e.Report.Get("file_guard_ratio")
	t.Logf("%s = %.3f (%s)", m.Key, m.Value, m.Note)
}
