package bench

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConnBudget(t *testing.T) {
	assert.Equal(t, 82, ConnBudget(100, 3, 5), "100 less 3 reserved, 5 open and a margin of 10")
	assert.Equal(t, 1, ConnBudget(20, 3, 30), "never below one connection")
}

func TestWriteSVGGrowthPanels(t *testing.T) {
	g := &Growth{}
	for i, w := range GrowthWorkers {
		g.Cycle = append(g.Cycle, CyclePoint{Workers: w, Pool: 82,
			Lease: Spread{Median: float64(1000 * (i + 1))}, Seed: Spread{Median: float64(1100 * (i + 1))},
			Ratio: Spread{Median: 0.8 + 0.05*float64(i)}})
	}
	g.Renewal = []RenewalPoint{{Leases: 10000, StmtMsPer: 2, HeapPerLease: 600}, {Leases: 100000, StmtMsPer: 4, HeapPerLease: 550}}
	var buf bytes.Buffer
	require.NoError(t, WriteSVG(&buf, sample(), []Series{{Name: "n", Samples: []time.Duration{time.Millisecond}}}, g))
	dec := xml.NewDecoder(&buf)
	var cy []float64 // y of every point, in drawing order
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "chart is well-formed XML")
		se, ok := tok.(xml.StartElement)
		if !ok || se.Name.Local != "circle" {
			continue
		}
		for _, a := range se.Attr {
			if a.Name.Local == "cy" {
				v, err := strconv.ParseFloat(a.Value, 64)
				require.NoError(t, err)
				cy = append(cy, v)
			}
		}
	}
	// fencekit and seed (4 each), the ratio (4), heartbeat time (2), heap (2).
	require.Len(t, cy, 16)
	for i := 1; i < 4; i++ {
		assert.Less(t, cy[i], cy[i-1], "a higher rate is drawn higher (smaller y)")
		assert.Less(t, cy[8+i], cy[8+i-1], "a higher ratio is drawn higher")
	}
	assert.Less(t, cy[13], cy[12], "more heartbeat time is drawn higher")
	assert.Greater(t, cy[15], cy[14], "less heap per lease is drawn lower")
}

func TestWriteSVGWithoutGrowthHasNoPanels(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, WriteSVG(&buf, sample(), nil, nil))
	assert.NotContains(t, buf.String(), "<circle")
}
