package bench

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestSummarize(t *testing.T) {
	in := []float64{3, 1, math.NaN(), 2, math.Inf(1)}
	s := Summarize(in)
	assert.Equal(t, Spread{Min: 1, Median: 2, Max: 3, N: 3}, s)
	assert.True(t, math.IsNaN(in[2]) && in[0] == 3, "input not modified")
	assert.Equal(t, 2.5, Summarize([]float64{4, 1, 2, 3}).Median, "even count: mean of the middle two")
	e := Summarize(nil)
	assert.Zero(t, e.N)
	assert.True(t, math.IsNaN(e.Median))
}

func TestBusyTime(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	iv := []Interval{
		{at(50), at(70)}, // overlaps the next: union 50..80
		{at(60), at(80)},
		{at(10), at(20)},
		{at(80), at(85)},  // touches: 50..85
		{at(90), at(200)}, // clipped at 100
		{at(-5), at(5)},   // clipped at 0
	}
	assert.Equal(t, 5*time.Millisecond+10*time.Millisecond+35*time.Millisecond+10*time.Millisecond, BusyTime(iv, at(0), at(100)))
	assert.Zero(t, BusyTime(iv, at(300), at(400)))
	assert.Zero(t, BusyTime(nil, at(0), at(100)))
}
