package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"
)

// Percentile returns the p-th percentile (0 ≤ p ≤ 100) of samples by the
// nearest-rank method; 0 for no samples. samples need not be sorted and are
// not modified.
func Percentile(samples []time.Duration, p float64) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), samples...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	rank = min(max(rank, 1), len(s))
	return s[rank-1]
}

// Ms converts d to float milliseconds.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Pair accumulates the two sides of an alternating comparison: A is the
// baseline, B the candidate; each adds operations and the time they took.
type Pair struct {
	AOps, BOps   int
	ATime, BTime time.Duration
}

// AddA records n operations of the baseline taking d.
func (p *Pair) AddA(n int, d time.Duration) { p.AOps += n; p.ATime += d }

// AddB records n operations of the candidate taking d.
func (p *Pair) AddB(n int, d time.Duration) { p.BOps += n; p.BTime += d }

// ARate and BRate are operations per second of each side (0 if untimed).
func (p Pair) ARate() float64 { return rate(p.AOps, p.ATime) }

// BRate is the candidate's operations per second.
func (p Pair) BRate() float64 { return rate(p.BOps, p.BTime) }

// ThroughputRatio is BRate/ARate (≥ 1 means B is faster); NaN if undefined.
func (p Pair) ThroughputRatio() float64 { return div(p.BRate(), p.ARate()) }

// CostRatio is B's time per operation over A's (≤ 1 means B is cheaper);
// NaN if undefined.
func (p Pair) CostRatio() float64 { return div(p.ARate(), p.BRate()) }

func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

func div(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

// Cmp says how a Metric compares with its target.
type Cmp string

// Comparison directions of a target.
const (
	AtMost  Cmp = "<="
	AtLeast Cmp = ">="
	None    Cmp = ""
)

// Metric is one reported figure.
type Metric struct {
	Key    string  // JSON key
	Value  float64 // NaN when not measured
	Unit   string
	Target float64 // meaningful when Cmp != None
	Cmp    Cmp
	Note   string // how it was measured or why it is missing
	// Spread, when set, is the distribution of the figure over the rounds
	// of the run (Value is then usually Spread.Median).
	Spread *Spread
}

// Met reports whether the metric meets its target; false when it has none
// or was not measured.
func (m Metric) Met() bool {
	if math.IsNaN(m.Value) || math.IsInf(m.Value, 0) {
		return false
	}
	switch m.Cmp {
	case AtMost:
		return m.Value <= m.Target
	case AtLeast:
		return m.Value >= m.Target
	}
	return false
}

// Status is "met", "NOT met", "n/a" (not measured) or "" (no target).
func (m Metric) Status() string {
	switch {
	case math.IsNaN(m.Value):
		return "n/a"
	case m.Cmp == None:
		return ""
	case m.Met():
		return "met"
	}
	return "NOT met"
}

// Report is the ordered list of metrics of one run plus free-form context.
type Report struct {
	Metrics []Metric
	Info    map[string]any // extra JSON fields (mode, errors, ...)
}

// Add appends m.
func (r *Report) Add(m Metric) { r.Metrics = append(r.Metrics, m) }

// Get returns the metric with key k.
func (r *Report) Get(k string) (Metric, bool) {
	for _, m := range r.Metrics {
		if m.Key == k {
			return m, true
		}
	}
	return Metric{}, false
}

// JSONLine returns the report as one JSON object on one line (no trailing
// newline): every metric key with its value (null when not measured,
// rounded to 4 decimals), the Info fields and, under "spread", each
// metric's [min, median, max, rounds] where it has a Spread.
func (r *Report) JSONLine() (string, error) {
	obj := map[string]any{}
	for k, v := range r.Info {
		obj[k] = v
	}
	spread := map[string][]any{}
	for _, m := range r.Metrics {
		obj[m.Key] = round4(m.Value)
		if m.Spread != nil {
			spread[m.Key] = []any{round4(m.Spread.Min), round4(m.Spread.Median), round4(m.Spread.Max), m.Spread.N}
		}
	}
	if len(spread) > 0 {
		obj["spread"] = spread
	}
	b, err := json.Marshal(obj)
	return string(b), err
}

func round4(v float64) any {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return math.Round(v*1e4) / 1e4
}

// WriteTable writes an aligned text table of the metrics; the "min / median
// / max" column shows each figure's spread over the rounds, where it has one.
func (r *Report) WriteTable(w io.Writer) error {
	rows := [][]string{{"metric", "value", "unit", "target", "status", "min / median / max (rounds)", "note"}}
	for _, m := range r.Metrics {
		v := "n/a"
		if !math.IsNaN(m.Value) {
			v = fmt.Sprintf("%.4g", m.Value)
		}
		tg := ""
		if m.Cmp != None {
			tg = fmt.Sprintf("%s %g", m.Cmp, m.Target)
		}
		sp := ""
		if m.Spread != nil {
			sp = fmt.Sprintf("%.4g / %.4g / %.4g (%d)", m.Spread.Min, m.Spread.Median, m.Spread.Max, m.Spread.N)
		}
		rows = append(rows, []string{m.Key, v, m.Unit, tg, m.Status(), sp, m.Note})
	}
	width := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, c := range row {
			width[i] = max(width[i], len(c))
		}
	}
	var sb strings.Builder
	for _, row := range rows {
		for i, c := range row {
			if i == len(row)-1 {
				sb.WriteString(c)
			} else {
				fmt.Fprintf(&sb, "%-*s  ", width[i], c)
			}
		}
		sb.WriteString("\n")
	}
	_, err := io.WriteString(w, sb.String())
	return err
}
