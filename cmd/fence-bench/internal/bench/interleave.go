package bench

import (
	"fmt"
	"math"
	"time"
)

// Op is one side of an operation-by-operation comparison: it performs one
// operation; round is the round's index (-1 for the warm-up), for sides
// that need a fresh key per operation.
type Op struct {
	Name string
	Run  func(round int) error
}

// Interleaved holds each side's time per operation: Time[side][round].
type Interleaved struct {
	Names []string
	Time  [][]time.Duration
}

// Interleave runs one untimed warm-up round and then rounds of one
// operation per side, in the order Order(r, len(ops)) (so each side runs
// in every position), until at least minRounds rounds have run and until
// has passed. It stops at the first error, naming the side.
func Interleave(ops []Op, minRounds int, until time.Time) (*Interleaved, error) {
	res := &Interleaved{Names: make([]string, len(ops)), Time: make([][]time.Duration, len(ops))}
	for i, op := range ops {
		res.Names[i] = op.Name
	}
	if len(ops) == 0 {
		return res, nil
	}
	for _, op := range ops {
		if err := op.Run(-1); err != nil {
			return nil, fmt.Errorf("%s (warm-up): %w", op.Name, err)
		}
	}
	for r := 0; r < minRounds || time.Now().Before(until); r++ {
		for _, k := range Order(r, len(ops)) {
			t0 := time.Now()
			if err := ops[k].Run(r); err != nil {
				return nil, fmt.Errorf("%s (round %d): %w", ops[k].Name, r, err)
			}
			res.Time[k] = append(res.Time[k], time.Since(t0))
		}
	}
	return res, nil
}

// Rounds is the number of completed rounds.
func (in *Interleaved) Rounds() int {
	if len(in.Time) == 0 {
		return 0
	}
	return len(in.Time[0])
}

// PerOp is side k's mean time per operation (0 without rounds).
func (in *Interleaved) PerOp(k int) time.Duration {
	n := in.Rounds()
	if n == 0 {
		return 0
	}
	return sumDur(in.Time[k], 0, n) / time.Duration(n)
}

// Ratio returns side b's total time over side a's (both ran the same
// number of operations, so it is b's cost per operation relative to a's;
// NaN without rounds) and the spread of that ratio over blocks of
// consecutive rounds (the rounds split into at most blocks groups of
// equal size, the remainder going to the last).
func (in *Interleaved) Ratio(b, a, blocks int) (float64, Spread) {
	n := in.Rounds()
	total := ratioDur(sumDur(in.Time[b], 0, n), sumDur(in.Time[a], 0, n))
	blocks = min(max(blocks, 1), max(n, 1))
	size := n / blocks
	var per []float64
	for i := range blocks {
		lo, hi := i*size, (i+1)*size
		if i == blocks-1 {
			hi = n
		}
		if hi > lo {
			per = append(per, ratioDur(sumDur(in.Time[b], lo, hi), sumDur(in.Time[a], lo, hi)))
		}
	}
	return total, Summarize(per)
}

func sumDur(d []time.Duration, lo, hi int) time.Duration {
	var s time.Duration
	for _, x := range d[lo:hi] {
		s += x
	}
	return s
}

func ratioDur(b, a time.Duration) float64 {
	if a <= 0 {
		return math.NaN()
	}
	return float64(b) / float64(a)
}
