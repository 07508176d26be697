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
// series (p50, p90, p99, max) on a log axis, then, when g is not nil, the
// growth panels (GrowthPanels).
func WriteSVG(w io.Writer, r *Report, series []Series, g *Growth) error {
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
	h3 := 0
	if g != nil {
		h3 = growthHeight
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, h1+h2+h3)
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
	if g != nil {
		GrowthPanels(&sb, g, h1+h2)
	}
	sb.WriteString("</svg>\n")
	_, err := io.WriteString(w, sb.String())
	return err
}

// growthHeight is the height of the growth panels.
const growthHeight = 2*(panelH+70) + 40

const (
	panelW = 380
	panelH = 170
)

// curve is one line of a panel: its name, colour and one y per x.
type curve struct {
	name, color string
	ys          []float64
}

// GrowthPanels writes the growth panels of g at vertical offset top: the
// lease cycle's cycles per second of fencekit and the seed, and their
// ratio (with the 0.90 target), against the worker count; the heartbeat's
// statement time per renewal period and the heap per held lease against
// the number of leases. The x axes are logarithmic, so a cost growing in
// proportion to the load is a straight line and a regression a bend. Each
// point is a <circle class="pt">.
func GrowthPanels(sb *strings.Builder, g *Growth, top int) {
	fmt.Fprintf(sb, `<text x="10" y="%d" font-size="14" font-weight="bold">growth (log x): the lease cycle by workers, renewal by held leases (heartbeat)</text>`+"\n", top+20)
	var wx []float64
	var wl []string
	var lease, seed, ratio []float64
	for _, p := range g.Cycle {
		wx = append(wx, float64(p.Workers))
		wl = append(wl, fmt.Sprint(p.Workers))
		lease, seed, ratio = append(lease, p.Lease.Median), append(seed, p.Seed.Median), append(ratio, p.Ratio.Median)
	}
	var lx []float64
	var ll []string
	var ms, heap []float64
	for _, p := range g.Renewal {
		lx = append(lx, float64(p.Leases))
		ll = append(ll, fmt.Sprint(p.Leases))
		ms, heap = append(ms, p.StmtMsPer), append(heap, p.HeapPerLease)
	}
	y1, y2 := top+50, top+50+panelH+70
	linePanel(sb, 60, y1, "lease cycles per second (median over rounds)", "workers", wx, wl,
		[]curve{{"fencekit", "#2980b9", lease}, {"seed UPSERT+DELETE", "#7f8c8d", seed}}, math.NaN())
	linePanel(sb, 560, y1, "lease cycle / seed (median over rounds; dashed: 0.90)", "workers", wx, wl,
		[]curve{{"ratio", "#8e44ad", ratio}}, 0.90)
	linePanel(sb, 60, y2, "heartbeat statement time per renewal period (ms)", "held leases", lx, ll,
		[]curve{{"heartbeat", "#27ae60", ms}}, math.NaN())
	linePanel(sb, 560, y2, "heap per held lease (bytes)", "held leases", lx, ll,
		[]curve{{"HeapAlloc / lease", "#d35400", heap}}, math.NaN())
}

// linePanel draws one panel at (x0, y0): a log x axis over xs (labelled
// with labels), a linear y axis from 0 to 1.15 times the largest value
// (or ref), each curve as a polyline with a circle per point, and a dashed
// line at ref unless it is NaN.
func linePanel(sb *strings.Builder, x0, y0 int, title, xname string, xs []float64, labels []string, cs []curve, ref float64) {
	fmt.Fprintf(sb, `<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", x0, y0-8, html.EscapeString(title))
	fmt.Fprintf(sb, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", x0, y0, panelW, panelH)
	if len(xs) == 0 {
		fmt.Fprintf(sb, `<text x="%d" y="%d" fill="gray">not measured</text>`+"\n", x0+10, y0+20)
		return
	}
	ymax := 0.0
	for _, c := range cs {
		for _, v := range c.ys {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				ymax = math.Max(ymax, v)
			}
		}
	}
	if !math.IsNaN(ref) {
		ymax = math.Max(ymax, ref)
	}
	if ymax <= 0 {
		ymax = 1
	}
	ymax *= 1.15
	lo, hi := math.Log(xs[0]), math.Log(xs[len(xs)-1])
	px := func(x float64) float64 {
		if hi == lo {
			return float64(x0) + panelW/2
		}
		return float64(x0) + 20 + (panelW-40)*(math.Log(x)-lo)/(hi-lo)
	}
	py := func(v float64) float64 { return float64(y0+panelH) - panelH*v/ymax }
	for i, x := range xs {
		fmt.Fprintf(sb, `<text x="%.1f" y="%d" text-anchor="middle" fill="gray">%s</text>`+"\n", px(x), y0+panelH+14, html.EscapeString(labels[i]))
	}
	fmt.Fprintf(sb, `<text x="%d" y="%d" text-anchor="middle" fill="gray">%s</text>`+"\n", x0+panelW/2, y0+panelH+28, html.EscapeString(xname))
	for _, t := range []float64{0, ymax / 1.15 / 2, ymax / 1.15} {
		fmt.Fprintf(sb, `<text x="%d" y="%.1f" text-anchor="end" fill="gray">%.3g</text>`+"\n", x0-4, py(t)+4, t)
	}
	if !math.IsNaN(ref) {
		fmt.Fprintf(sb, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="black" stroke-dasharray="4,3"/>`+"\n", x0, py(ref), x0+panelW, py(ref))
	}
	for k, c := range cs {
		var pts []string
		for i, v := range c.ys {
			if i >= len(xs) || math.IsNaN(v) || math.IsInf(v, 0) {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(xs[i]), py(v)))
			fmt.Fprintf(sb, `<circle class="pt" cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s %s=%s: %.4g</title></circle>`+"\n",
				px(xs[i]), py(v), c.color, html.EscapeString(c.name), html.EscapeString(xname), html.EscapeString(labels[i]), v)
		}
		fmt.Fprintf(sb, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", c.color, strings.Join(pts, " "))
		fmt.Fprintf(sb, `<text x="%d" y="%d" fill="%s">%s</text>`+"\n", x0+8, y0+16+14*k, c.color, html.EscapeString(c.name))
	}
}
