package bench

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOrderRotates(t *testing.T) {
	pos := map[int]map[int]bool{}
	for r := range 3 {
		for p, s := range Order(r, 3) {
			if pos[s] == nil {
				pos[s] = map[int]bool{}
			}
			pos[s][p] = true
		}
	}
	for s := range 3 {
		assert.Len(t, pos[s], 3, "side %d runs once in every position over 3 rounds", s)
	}
	assert.Equal(t, []int{1, 2, 0}, Order(1, 3))
}

func TestShuffledVariesNeighbours(t *testing.T) {
	const n, rounds = 4, 400
	after := map[[2]int]int{} // (predecessor, side) -> rounds
	for r := range rounds {
		o := Shuffled(r, n)
		assert.ElementsMatch(t, Order(0, n), o, "round %d is a permutation", r)
		for p := 1; p < n; p++ {
			after[[2]int{o[p-1], o[p]}]++
		}
	}
	assert.Equal(t, Shuffled(7, n), Shuffled(7, n), "the same round, the same order")
	for a := range n {
		for b := range n {
			if a != b {
				// Each of the 12 ordered pairs is adjacent in about
				// rounds*3/12 = 100 rounds; a rotation gives 4 of them all.
				assert.Greater(t, after[[2]int{a, b}], 50, "side %d after side %d", b, a)
			}
		}
	}
}

// TestAlternate uses sides whose rates are known (operations reported for a
// fixed elapsed time), so the per-round ratios are exact.
func TestAlternate(t *testing.T) {
	var calls []string
	side := func(name string, ops func(r int) int) Side {
		var r int
		return Side{Name: name, Run: func(d time.Duration) (int, time.Duration, error) {
			calls = append(calls, name)
			if d == time.Millisecond { // warm-up
				return 1, d, nil
			}
			n := ops(r)
			r++
			return n, time.Second, nil
		}}
	}
	a := side("a", func(int) int { return 100 })
	b := side("b", func(r int) int { return []int{50, 80, 60}[r] })
	res, err := Alternate([]Side{a, b}, 3, time.Second, time.Millisecond)
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b", "a", "b", "b", "a", "a", "b"}, calls, "warm-up, then rotated rounds")
	assert.Equal(t, Spread{Min: 0.5, Median: 0.6, Max: 0.8, N: 3}, res.Ratio("b", "a"))
	assert.Equal(t, Spread{Min: 100, Median: 100, Max: 100, N: 3}, res.Rate("a"))
	assert.Equal(t, []int{300, 190}, res.Ops)

	boom := errors.New("boom")
	_, err = Alternate([]Side{a, {Name: "bad", Run: func(time.Duration) (int, time.Duration, error) { return 0, 0, boom }}}, 2, time.Second, 0)
	require.ErrorIs(t, err, boom)
	assert.Contains(t, err.Error(), "bad (round 0)")
}

func TestParallel(t *testing.T) {
	var seen [4]atomic.Int64
	n, el, err := Parallel(4, 20*time.Millisecond, func(w, i int) error {
		seen[w].Add(1)
		time.Sleep(time.Millisecond) // the operation's own duration
		return nil
	})
	require.NoError(t, err)
	var sum int64
	for w := range seen {
		assert.Positive(t, seen[w].Load(), "worker %d ran", w)
		sum += seen[w].Load()
	}
	assert.EqualValues(t, sum, n)
	assert.GreaterOrEqual(t, el, 20*time.Millisecond)

	boom := errors.New("boom")
	_, _, err = Parallel(2, time.Second, func(w, i int) error {
		if i == 3 {
			return boom
		}
		return nil
	})
	require.ErrorIs(t, err, boom)
}
