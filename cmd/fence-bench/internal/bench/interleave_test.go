package bench

import (
	"errors"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestInterleaveRunsEverySideOncePerRoundRotated records the sequence of
// calls: a warm-up round, then each round every side once, starting at the
// side Order gives.
func TestInterleaveRunsEverySideOncePerRoundRotated(t *testing.T) {
	var calls []string
	op := func(name string) Op {
		return Op{Name: name, Run: func(round int) error {
			calls = append(calls, name+":"+strconv.Itoa(round))
			return nil
		}}
	}
	in, err := Interleave([]Op{op("a"), op("b"), op("c")}, 3, time.Time{})
	require.NoError(t, err)
	assert.Equal(t, []string{
		"a:-1", "b:-1", "c:-1",
		"a:0", "b:0", "c:0",
		"b:1", "c:1", "a:1",
		"c:2", "a:2", "b:2",
	}, calls)
	assert.Equal(t, 3, in.Rounds())
	assert.Equal(t, []string{"a", "b", "c"}, in.Names)
	for k := range 3 {
		assert.Len(t, in.Time[k], 3)
	}
}

func TestInterleaveRunsUntilDeadline(t *testing.T) {
	n := 0
	until := time.Now().Add(5 * time.Millisecond)
	in, err := Interleave([]Op{{Name: "a", Run: func(int) error { n++; return nil }}}, 1, until)
	require.NoError(t, err)
	assert.False(t, time.Now().Before(until), "returned before the deadline")
	assert.Greater(t, in.Rounds(), 1)
	assert.Equal(t, in.Rounds()+1, n, "rounds plus the warm-up")
}

func TestInterleaveStopsAtFirstErrorNamingSide(t *testing.T) {
	boom := errors.New("boom")
	ran := 0
	_, err := Interleave([]Op{
		{Name: "ok", Run: func(int) error { ran++; return nil }},
		{Name: "bad", Run: func(r int) error {
			if r == 1 {
				return boom
			}
			return nil
		}},
	}, 5, time.Time{})
	require.ErrorIs(t, err, boom)
	assert.Contains(t, err.Error(), "bad (round 1)")
	assert.Equal(t, 2, ran, "warm-up and round 0; round 1 starts with bad")

	_, err = Interleave([]Op{{Name: "w", Run: func(r int) error { return boom }}}, 1, time.Time{})
	require.ErrorIs(t, err, boom)
	assert.Contains(t, err.Error(), "w (warm-up)")
}

func TestInterleavedRatioAndBlocks(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		d := make([]time.Duration, len(v))
		for i, x := range v {
			d[i] = time.Duration(x) * time.Millisecond
		}
		return d
	}
	in := &Interleaved{Names: []string{"a", "b"}, Time: [][]time.Duration{
		ms(1, 1, 2, 2, 4),
		ms(2, 2, 2, 2, 2),
	}}
	total, sp := in.Ratio(1, 0, 2)
	assert.InDelta(t, 1.0, total, 1e-12, "10 ms over 10 ms")
	// Blocks: rounds [0,2) -> 4/2 = 2; [2,5) -> 6/8 = 0.75.
	assert.Equal(t, 2, sp.N)
	assert.InDelta(t, 0.75, sp.Min, 1e-12)
	assert.InDelta(t, 2, sp.Max, 1e-12)
	assert.Equal(t, 2*time.Millisecond, in.PerOp(0))

	// More blocks than rounds: one block per round.
	_, sp = in.Ratio(0, 1, 50)
	assert.Equal(t, 5, sp.N)
	assert.InDelta(t, 0.5, sp.Min, 1e-12)
	assert.InDelta(t, 2, sp.Max, 1e-12)

	empty := &Interleaved{Names: []string{"a", "b"}, Time: [][]time.Duration{nil, nil}}
	total, sp = empty.Ratio(1, 0, 10)
	assert.True(t, math.IsNaN(total))
	assert.Equal(t, 0, sp.N)
	assert.Equal(t, time.Duration(0), empty.PerOp(0))
}
