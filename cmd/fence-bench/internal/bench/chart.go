package bench

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
	"time"
)

// Series is a named set of latency samples drawn as a distribution.
type Series struct {
	Name    string
	Samples []time.Duration
}

// WriteSVG draws the chart: one bar per metric with a target, as
// value/target on a common axis where 1 is the target (for AtLeast metrics
// the bar is target/value, so shorter is better for every bar and bars left
// of the line meet their targets), then the latency percentiles of each
// series (p50, p90, p99, max) on a log axis.
func WriteSVG(w io.Writer, r *Report, series []Series) error {
	var targeted []Metric
	for _, m := range r.Metrics {
		if m.Cmp != None {
			targeted = append(targeted, m)
		}
	}
	const (
		width  = 1000
		left   = 360
		plotW  = 560
		barH   = 18
		gap    = 8
		top    = 40
		maxRel = 2.0
	)
	h1 := top + len(targeted)*(barH+gap) + 30
	h2 := 40 + len(series)*4*(barH/2+4) + 40
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, h1+h2)
	fmt.Fprintf(&sb, `<text x="10" y="20" font-size="14" font-weight="bold">fencekit targets: cost relative to target (1 = target; left of the line = met)</text>`+"\n")
	x := func(rel float64) float64 { return left + plotW*math.Min(rel, maxRel)/maxRel }
	fmt.Fprintf(&sb, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="black" stroke-dasharray="4,3"/>`+"\n", x(1), top-5, x(1), h1-25)
	fmt.Fprintf(&sb, `<text x="%.1f" y="%d" text-anchor="middle">target</text>`+"\n", x(1), h1-10)
	for i, m := range targeted {
		y := top + i*(barH+gap)
		rel := math.NaN()
		switch m.Cmp {
		case AtMost:
			rel = m.Value / m.Target
		case AtLeast:
			rel = m.Target / m.Value
		}
		label := fmt.Sprintf("%s = %.3g (%s %g)", m.Key, m.Value, m.Cmp, m.Target)
		fmt.Fprintf(&sb, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", left-6, y+13, html.EscapeString(label))
		if math.IsNaN(rel) || math.IsInf(rel, 0) {
			fmt.Fprintf(&sb, `<text x="%d" y="%d" fill="gray">not measured</text>`+"\n", left+4, y+13)
			continue
		}
		color := "#c0392b"
		if m.Met() {
			color = "#27ae60"
		}
		fmt.Fprintf(&sb, `<rect class="bar" x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", left, y, x(rel)-left, barH, color)
		if rel > maxRel {
			fmt.Fprintf(&sb, `<text x="%.1f" y="%d" fill="white" text-anchor="end">%.1fx ▶</text>`+"\n", x(rel)-4, y+13, rel)
		}
	}
	y0 := h1 + 20
	fmt.Fprintf(&sb, `<text x="10" y="%d" font-size="14" font-weight="bold">handover latency percentiles (ms, log scale)</text>`+"\n", y0)
	lx := func(ms float64) float64 { // log axis from 0.1 ms to 10 s
		ms = math.Min(math.Max(ms, 0.1), 10000)
		return left + plotW*(math.Log10(ms)+1)/5
	}
	for _, tick := range []float64{0.1, 1, 10, 100, 1000, 10000} {
		fmt.Fprintf(&sb, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/><text x="%.1f" y="%d" text-anchor="middle" fill="gray">%g</text>`+"\n",
			lx(tick), y0+10, lx(tick), h1+h2-25, lx(tick), h1+h2-10, tick)
	}
	y := y0 + 14
	for _, s := range series {
		for _, p := range []struct {
			name string
			q    float64
		}{{"p50", 50}, {"p90", 90}, {"p99", 99}, {"max", 100}} {
			v := Ms(Percentile(s.Samples, p.q))
			fmt.Fprintf(&sb, `<text x="%d" y="%d" text-anchor="end">%s %s = %.2f ms (n=%d)</text>`+"\n", left-6, y+9, html.EscapeString(s.Name), p.name, v, len(s.Samples))
			fmt.Fprintf(&sb, `<rect class="lat" x="%d" y="%d" width="%.1f" height="%d" fill="#2980b9"/>`+"\n", left, y, lx(v)-left, barH/2)
			y += barH/2 + 4
		}
		y += 4
	}
	sb.WriteString("</svg>\n")
	_, err := io.WriteString(w, sb.String())
	return err
}
