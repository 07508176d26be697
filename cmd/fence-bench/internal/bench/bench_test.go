package bench

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPercentile(t *testing.T) {
	var s []time.Duration
	for i := 100; i >= 1; i-- {
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	assert.Equal(t, 50*time.Millisecond, Percentile(s, 50))
	assert.Equal(t, 99*time.Millisecond, Percentile(s, 99))
	assert.Equal(t, 100*time.Millisecond, Percentile(s, 100))
	assert.Equal(t, time.Millisecond, Percentile(s, 0))
	assert.Equal(t, 100*time.Millisecond, s[0], "input not modified")
	assert.Zero(t, Percentile(nil, 50))
}

func TestPair(t *testing.T) {
	var p Pair
	p.AddA(100, time.Second)
	p.AddB(50, time.Second)
	p.AddA(100, time.Second)
	p.AddB(50, time.Second)
	assert.InDelta(t, 100, p.ARate(), 1e-9)
	assert.InDelta(t, 0.5, p.ThroughputRatio(), 1e-9)
	assert.InDelta(t, 2, p.CostRatio(), 1e-9)
	assert.True(t, math.IsNaN(Pair{}.CostRatio()))
}

func sample() *Report {
	r := &Report{Info: map[string]any{"mode": "quick"}}
	r.Add(Metric{Key: "pg_guard_overhead_ratio", Value: 1.05, Target: 1.10, Cmp: AtMost})
	r.Add(Metric{Key: "renew_leases_per_statement", Value: 400, Target: 500, Cmp: AtLeast})
	r.Add(Metric{Key: "handover_p50_ms", Value: math.NaN(), Target: 20, Cmp: AtMost, Note: "lease failed"})
	r.Add(Metric{Key: "raw_cycles_per_s", Value: 1234.56789})
	return r
}

func TestJSONLineShape(t *testing.T) {
	line, err := sample().JSONLine()
	require.NoError(t, err)
	assert.NotContains(t, line, "\n")
	var obj map[string]any
	require.NoError(t, json.Unmarshal([]byte(line), &obj))
	assert.Equal(t, 1.05, obj["pg_guard_overhead_ratio"])
	assert.Equal(t, 1234.5679, obj["raw_cycles_per_s"])
	v, present := obj["handover_p50_ms"]
	assert.True(t, present, "unmeasured keys are present")
	assert.Nil(t, v)
	assert.Equal(t, "quick", obj["mode"])
}

func TestStatusAndTable(t *testing.T) {
	r := sample()
	want := map[string]string{"pg_guard_overhead_ratio": "met", "renew_leases_per_statement": "NOT met", "handover_p50_ms": "n/a", "raw_cycles_per_s": ""}
	for k, s := range want {
		m, ok := r.Get(k)
		require.True(t, ok)
		assert.Equal(t, s, m.Status(), k)
	}
	var buf bytes.Buffer
	require.NoError(t, r.WriteTable(&buf))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	assert.Len(t, lines, 5)
	assert.Contains(t, lines[2], "NOT met")
}

func TestWriteSVG(t *testing.T) {
	var buf bytes.Buffer
	s := []Series{{Name: "notify", Samples: []time.Duration{time.Millisecond, 3 * time.Millisecond}}}
	require.NoError(t, WriteSVG(&buf, sample(), s, nil))
	dec := xml.NewDecoder(&buf)
	bars, lats := 0, 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "chart is well-formed XML")
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "rect" {
			for _, a := range se.Attr {
				if a.Name.Local == "class" && a.Value == "bar" {
					bars++
				}
				if a.Name.Local == "class" && a.Value == "lat" {
					lats++
				}
			}
		}
	}
	assert.Equal(t, 2, bars, "one bar per measured metric with a target")
	assert.Equal(t, 4, lats, "p50, p90, p99, max of the one series")
}
