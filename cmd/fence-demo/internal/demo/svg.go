package demo

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"os"
	"strings"
	"text/template"
	"time"
)

// svgAttr is one attribute of an SVG element.
type svgAttr struct{ K, V string }

// svgEl is one SVG element; Text, when set, is its escaped content.
type svgEl struct {
	Tag   string
	Attrs []svgAttr
	Text  string
}

var svgTmpl = template.Must(template.New("svg").Funcs(template.FuncMap{"esc": xmlEscape}).Parse(
	`<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{{.W}}" height="{{.H}}" viewBox="0 0 {{.W}} {{.H}}" font-family="Helvetica, Arial, sans-serif">
<title>{{esc .Title}}</title>
<defs>
<pattern id="hatch" width="8" height="8" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="8" height="8" fill="#fff4d6"/><line x1="0" y1="0" x2="0" y2="8" stroke="#f0b429" stroke-width="3"/></pattern>
<pattern id="untrusted" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(-45)"><rect width="6" height="6" fill="#e6f4fb"/><line x1="0" y1="0" x2="0" y2="6" stroke="#7cc4e4" stroke-width="2"/></pattern>
<marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#8a94a6"/></marker>
</defs>
{{range .Els}}<{{.Tag}}{{range .Attrs}} {{.K}}="{{esc .V}}"{{end}}{{if .Text}}>{{esc .Text}}</{{.Tag}}>{{else}}/>{{end}}
{{end}}</svg>
`))

func xmlEscape(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// Colours of the picture (also used by the legend).
const (
	colA        = "#1b8fc4"
	colB        = "#8e44ad"
	colAccepted = "#1e9e5a"
	colRefused  = "#d64541"
	colHeld     = "#e08e0b"
	colInk      = "#1f2933"
	colMuted    = "#6b7785"
	colGrid     = "#e4e7eb"
)

type svgDoc struct {
	W, H  int
	Title string
	Els   []svgEl
}

func (d *svgDoc) el(tag, text string, kv ...any) {
	e := svgEl{Tag: tag, Text: text}
	for i := 0; i+1 < len(kv); i += 2 {
		var v string
		switch x := kv[i+1].(type) {
		case float64:
			v = strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.1f", x), "0"), ".")
		default:
			v = fmt.Sprint(x)
		}
		e.Attrs = append(e.Attrs, svgAttr{K: kv[i].(string), V: v})
	}
	d.Els = append(d.Els, e)
}

func (d *svgDoc) text(x, y float64, size int, fill, anchor, weight, s string) {
	d.el("text", s, "x", x, "y", y, "font-size", size, "fill", fill, "text-anchor", anchor, "font-weight", weight)
}

func textWidth(s string, size int, weight string) float64 {
	f := 0.54
	if weight == "bold" {
		f = 0.6
	}
	return float64(len([]rune(s))) * float64(size) * f
}

// side puts a label gap pixels right of x, or left of it (right-aligned)
// when it would run past the picture's right edge.
func (d *svgDoc) side(x, y, gap float64, size int, fill, weight, s string) {
	if x+gap+textWidth(s, size, weight) > float64(d.W)-8 {
		d.label(x-gap, y, size, fill, "end", weight, s)
		return
	}
	d.label(x+gap, y, size, fill, "start", weight, s)
}

// label is text on a white, slightly transparent box, for annotations over
// bars and lines. The box width is estimated from the text length.
func (d *svgDoc) label(x, y float64, size int, fill, anchor, weight, s string) {
	w := textWidth(s, size, weight)
	bx := x - 3
	switch anchor {
	case "end":
		bx = x - w - 3
	case "middle":
		bx = x - w/2 - 3
	}
	d.el("rect", "", "x", bx, "y", y-float64(size)+1, "width", w+6, "height", float64(size)+5, "rx", 3.0, "fill", "#ffffff", "opacity", 0.85)
	d.text(x, y, size, fill, anchor, weight, s)
}

// mark draws an accepted (check) or refused (cross) write marker.
func (d *svgDoc) mark(x, y float64, ok bool) {
	if ok {
		d.el("circle", "", "cx", x, "cy", y, "r", 7.0, "fill", colAccepted, "stroke", "#fff", "stroke-width", 1.5)
		d.el("path", "", "d", fmt.Sprintf("M%.1f,%.1f l2.6,2.8 l5,-5.6", x-3.8, y), "fill", "none", "stroke", "#fff", "stroke-width", 2.0, "stroke-linecap", "round")
		return
	}
	d.el("circle", "", "cx", x, "cy", y, "r", 7.0, "fill", colRefused, "stroke", "#fff", "stroke-width", 1.5)
	d.el("path", "", "d", fmt.Sprintf("M%.1f,%.1f l6,6 M%.1f,%.1f l-6,6", x-3, y-3, x+3, y-3), "stroke", "#fff", "stroke-width", 2.0, "stroke-linecap", "round")
}

// diamond draws a lease-call marker: filled when it worked, hollow red when
// refused.
func (d *svgDoc) diamond(x, y float64, ok bool) {
	p := fmt.Sprintf("M%.1f,%.1f l6,6 l-6,6 l-6,-6 z", x, y-6)
	if ok {
		d.el("path", "", "d", p, "fill", "#fff", "stroke", colInk, "stroke-width", 1.5)
		return
	}
	d.el("path", "", "d", p, "fill", "#fff", "stroke", colRefused, "stroke-width", 2.0)
}

func (d *svgDoc) square(x, y float64, fill string) {
	d.el("rect", "", "x", x-6, "y", y-6, "width", 12.0, "height", 12.0, "rx", 2.0, "fill", fill, "stroke", "#fff", "stroke-width", 1.5)
}

// timelineFacts are the events the picture is drawn from.
type timelineFacts struct {
	acqA, endA, acqB, relB, stall, heal *Event
	dbExpA                              time.Duration
	sent                                map[string]*Event // A's write-sent by store
	writes                              []Event
	calls                               []Event // renew and release of A
	retry, intr                         *Event
	last                                time.Duration
}

func facts(evs []Event) timelineFacts {
	f := timelineFacts{sent: map[string]*Event{}}
	for i := range evs {
		e := &evs[i]
		if e.Actor == ActorC || e.Actor == ActorD {
			break // the picture is of the first scene
		}
		f.last = max(f.last, e.At)
		switch {
		case e.Kind == KindAcquire && e.Actor == ActorA && e.Outcome == OK && f.acqA == nil:
			f.acqA = e
		case e.Kind == KindLeaseEnd && e.Actor == ActorA:
			f.endA = e
		case e.Kind == KindInspect && e.Actor == ActorB && e.Status == "held" && e.Until > 0:
			f.dbExpA = e.Until
		case e.Kind == KindAcquire && e.Actor == ActorB && e.Outcome == OK:
			f.acqB = e
		case e.Kind == KindRelease && e.Actor == ActorB:
			f.relB = e
		case e.Kind == KindStall:
			f.stall = e
		case e.Kind == KindHeal:
			f.heal = e
		case e.Kind == KindWriteSent:
			f.sent[e.Store] = e
		case e.Kind == KindWrite:
			f.writes = append(f.writes, *e)
		case (e.Kind == KindRenew || e.Kind == KindRelease) && e.Actor == ActorA:
			f.calls = append(f.calls, *e)
		case e.Kind == KindAcquire && e.Actor == ActorRetry:
			f.retry = e
		case e.Kind == KindAcquire && e.Actor == ActorIntrude:
			f.intr = e
		}
	}
	if f.dbExpA == 0 && f.acqB != nil {
		f.dbExpA = f.acqB.At
	}
	return f
}

func tickStep(span time.Duration) time.Duration {
	for _, s := range []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 250 * time.Millisecond,
		500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second} {
		if span/s <= 12 {
			return s
		}
	}
	return 30 * time.Second
}

// RenderSVG draws the scenario's timeline: the two runs' lease intervals as
// bars on a time axis (trusted part solid, the part only the database still
// counted hatched), the network stall, every guarded write as a marker at
// the moment its answer came back (accepted ✓ or refused ✗, with the token
// numbers), the refused acquisitions of the other clients, and a legend.
func RenderSVG(res *Result) ([]byte, error) {
	f := facts(res.Events)
	if f.acqA == nil || f.acqB == nil {
		return nil, fmt.Errorf("demo: timeline: the run has no acquisitions to draw (%d events)", len(res.Events))
	}
	const (
		W, left, right, top = 1200, 190.0, 40.0, 92.0
		laneH               = 112.0
	)
	lanes := 4
	axisY := top + float64(lanes)*laneH + 8
	H := int(axisY) + 120
	d := &svgDoc{W: W, H: H, Title: "fence-demo timeline"}
	span := f.last + f.last/25
	step := tickStep(span)
	span = time.Duration(math.Ceil(float64(span)/float64(step))) * step
	plotW := float64(W) - left - right
	x := func(t time.Duration) float64 { return left + plotW*float64(t)/float64(span) }

	d.el("rect", "", "x", 0.0, "y", 0.0, "width", W, "height", H, "fill", "#ffffff")
	ok := 0
	for _, c := range res.Checks {
		if c.OK {
			ok++
		}
	}
	d.text(24, 38, 22, colInk, "start", "bold", "One conversation, two devices: a stalled run is fenced off")
	sub := fmt.Sprintf("session %s · TTL %v · run A (token %d) refused everywhere after run B (token %d) took over", res.Key, res.TTL, res.TokenA, res.TokenB)
	if res.TokenD != 0 { // the second scene is told in text only
		sub += fmt.Sprintf(" · scene 2: run C (%d) taken over live by D (%d)", res.TokenC, res.TokenD)
	}
	d.text(24, 64, 13, colMuted, "start", "normal", fmt.Sprintf("%s · %d/%d checks held", sub, ok, len(res.Checks)))

	// Grid and axis.
	for t := time.Duration(0); t <= span; t += step {
		d.el("line", "", "x1", x(t), "y1", top-6, "x2", x(t), "y2", axisY, "stroke", colGrid, "stroke-width", 1.0)
		d.text(x(t), axisY+18, 12, colMuted, "middle", "normal", fmt.Sprintf("%.2gs", t.Seconds()))
	}
	d.el("line", "", "x1", left, "y1", axisY, "x2", left+plotW, "y2", axisY, "stroke", colMuted, "stroke-width", 1.0)
	d.text(left+plotW, axisY+36, 12, colMuted, "end", "normal", "time since run A acquired (monotonic clock)")

	laneY := func(i int) float64 { return top + laneH*float64(i) + laneH/2 }
	names := []struct{ title, sub, col string }{
		{"desktop · run A", fmt.Sprintf("token %d", res.TokenA), colA},
		{"browser · run B", fmt.Sprintf("token %d", res.TokenB), colB},
		{"desktop · retry", "plain Acquire", colInk},
		{"intruder", "other account", colInk},
	}
	for i, n := range names {
		y := laneY(i)
		if i%2 == 1 {
			d.el("rect", "", "x", 0.0, "y", y-laneH/2, "width", W, "height", laneH, "fill", "#f7f9fb")
		}
		d.text(24, y-2, 15, n.col, "start", "bold", n.title)
		d.text(24, y+16, 12, colMuted, "start", "normal", n.sub)
	}
	// Re-draw the grid over the lane backgrounds, lightly.
	for t := time.Duration(0); t <= span; t += step {
		d.el("line", "", "x1", x(t), "y1", top, "x2", x(t), "y2", axisY, "stroke", colGrid, "stroke-width", 1.0, "stroke-dasharray", "2 4")
	}

	yA, yB := laneY(0), laneY(1)
	// The stall, on A's lane.
	if f.stall != nil && f.heal != nil {
		d.el("rect", "", "x", x(f.stall.At), "y", yA-laneH/2+4, "width", x(f.heal.At)-x(f.stall.At), "height", laneH-8, "fill", "url(#hatch)", "opacity", 0.55)
		d.label(x(f.stall.At)+6, yA+50, 11, "#8d6708", "start", "bold", fmt.Sprintf("network to run A stalled for %v: requests held, no replies", (f.heal.At-f.stall.At).Round(time.Millisecond)))
	}
	bar := func(y float64, from, to time.Duration, fill, label string) {
		d.el("rect", "", "x", x(from), "y", y-11, "width", math.Max(x(to)-x(from), 2), "height", 22.0, "rx", 4.0, "fill", fill)
		d.text(x(from)+8, y+4.5, 12, "#fff", "start", "bold", label)
	}
	// A's lease: trusted until its context ended; then only the database
	// still counted it, until its expiry.
	endA := f.last
	if f.endA != nil {
		endA = f.endA.At
	}
	bar(yA, f.acqA.At, endA, colA, fmt.Sprintf("run A holds the lease · token %d", res.TokenA))
	if f.dbExpA > endA {
		d.el("rect", "", "x", x(endA), "y", yA-11, "width", x(f.dbExpA)-x(endA), "height", 22.0, "fill", "url(#untrusted)", "stroke", colA, "stroke-width", 1.0, "stroke-dasharray", "3 2")
	}
	if f.endA != nil {
		d.el("line", "", "x1", x(endA), "y1", yA-20, "x2", x(endA), "y2", yA+20, "stroke", colRefused, "stroke-width", 2.0)
		d.label(x(endA)+5, yA+50, 11, colRefused, "start", "bold", "A's context cancelled at its trust deadline")
	}
	// B's lease.
	endB := f.last
	if f.relB != nil {
		endB = f.relB.At
	}
	bar(yB, f.acqB.At, endB, colB, fmt.Sprintf("run B · token %d", res.TokenB))
	d.el("line", "", "x1", x(f.acqB.At), "y1", yA+12, "x2", x(f.acqB.At), "y2", yB-12, "stroke", colMuted, "stroke-width", 1.0, "stroke-dasharray", "4 3", "marker-end", "url(#arrow)")
	d.text(x(f.acqB.At)-6, yB-30, 11, colMuted, "end", "normal", "expired at the database → B takes over")

	// Writes: s3 above the bar, pg below; A's in-flight ones from send to answer.
	rowY := func(lane float64, store string) float64 {
		if store == "s3" {
			return lane - 30
		}
		return lane + 30
	}
	for _, w := range f.writes {
		lane := yB
		if w.Actor == ActorA {
			lane = yA
		}
		y := rowY(lane, w.Store)
		if s := f.sent[w.Store]; s != nil && w.Actor == ActorA {
			d.el("line", "", "x1", x(s.At), "y1", y, "x2", x(w.At)-8, "y2", y, "stroke", "#8a94a6", "stroke-width", 1.5, "stroke-dasharray", "5 4", "marker-end", "url(#arrow)")
			d.el("circle", "", "cx", x(s.At), "cy", y, "r", 3.5, "fill", "#8a94a6")
			d.label(x(s.At)+8, y-7, 11, colMuted, "start", "normal", fmt.Sprintf("%s write sent with token %d, in flight…", storeName(w.Store), w.Token))
		}
		accepted := w.Outcome == OK
		d.mark(x(w.At), y, accepted)
		var label string
		switch {
		case accepted:
			label = fmt.Sprintf("%s accepted (token %d)", storeName(w.Store), w.Token)
		case w.Outcome == Stale:
			label = fmt.Sprintf("%s refused: stale %d < %d", storeName(w.Store), w.Presented, w.Highest)
		default:
			label = fmt.Sprintf("%s failed", storeName(w.Store))
		}
		d.side(x(w.At), y+4, 12, 12, colInk, "bold", label)
	}
	// A's late renew and release.
	// (Successful renewals, the explicit one and the background ones, are
	// part of the bar.)
	var late []Event
	for _, c := range f.calls {
		if c.Outcome != OK {
			late = append(late, c)
		}
	}
	for i, c := range late {
		d.diamond(x(c.At)+float64(i)*5, yA, false)
	}
	if n := len(late); n > 0 {
		d.side(x(late[n-1].At)+float64(n-1)*5, yA+4, 10, 11, colRefused, "bold", "late renew + release refused")
	}
	other := func(lane int, e *Event, label string) {
		if e == nil {
			return
		}
		col := colHeld
		if e.Outcome == Unauthorized {
			col = colRefused
		}
		y := laneY(lane)
		d.square(x(e.At), y, col)
		d.side(x(e.At), y+4, 12, 12, colInk, "bold", label)
	}
	if f.retry != nil {
		other(2, f.retry, fmt.Sprintf("Acquire refused: held by run B (token %d)", f.retry.Token))
	}
	other(3, f.intr, "refused by the Authorizer: no token drawn")

	// Legend.
	ly := axisY + 64.0
	lx := 24.0
	item := func(w float64, draw func(x, y float64), label string) {
		draw(lx, ly)
		d.text(lx+w+6, ly+4, 12, colInk, "start", "normal", label)
		lx += w + 12 + float64(len(label))*6.4
	}
	item(28, func(x, y float64) {
		d.el("rect", "", "x", x, "y", y-7, "width", 28.0, "height", 14.0, "rx", 3.0, "fill", colA)
	}, "lease held and trusted")
	item(28, func(x, y float64) {
		d.el("rect", "", "x", x, "y", y-7, "width", 28.0, "height", 14.0, "fill", "url(#untrusted)", "stroke", colA, "stroke-dasharray", "3 2")
	}, "unexpired at the database only")
	item(28, func(x, y float64) {
		d.el("rect", "", "x", x, "y", y-8, "width", 28.0, "height", 16.0, "fill", "url(#hatch)", "opacity", 0.7)
	}, "network stall")
	item(14, func(x, y float64) { d.mark(x+7, y, true) }, "write accepted")
	item(14, func(x, y float64) { d.mark(x+7, y, false) }, "write refused (stale token)")
	item(14, func(x, y float64) { d.diamond(x+7, y, false) }, "renew/release refused")
	item(14, func(x, y float64) { d.square(x+7, y, colHeld) }, "acquire refused (held)")
	d.text(24, ly+30, 11, colMuted, "start", "normal", "Markers sit at the moment the answer came back. In each run's lane MinIO (s3guard) writes are above the bar, PostgreSQL (pgguard) writes below it.")

	var buf bytes.Buffer
	if err := svgTmpl.Execute(&buf, d); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func storeName(s string) string {
	if s == "s3" {
		return "MinIO"
	}
	return "PostgreSQL"
}

// WriteSVGFile renders the timeline of res to path.
func WriteSVGFile(path string, res *Result) error {
	b, err := RenderSVG(res)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil { //nolint:gosec // a picture meant to be opened by any viewer
		return fmt.Errorf("demo: write timeline: %w", err)
	}
	return nil
}
