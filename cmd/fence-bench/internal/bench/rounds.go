package bench

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Side is one contender of a side-by-side comparison: Run performs
// operations for about d and reports how many completed and how long they
// took (its own clock: a side run in another process times itself).
type Side struct {
	Name string
	Run  func(d time.Duration) (ops int, elapsed time.Duration, err error)
}

// Rounds is the outcome of Alternate.
type Rounds struct {
	Names []string
	Rates [][]float64     // Rates[round][side]: operations per second
	Ops   []int           // per side, all rounds
	Time  []time.Duration // per side, all rounds
}

// Order returns the order in which round r runs n sides: rotated by r, so
// that over n rounds each side runs once in every position.
func Order(r, n int) []int {
	o := make([]int, n)
	for j := range n {
		o[j] = (j + r) % n
	}
	return o
}

// Shuffled returns the order in which round r runs n sides: a permutation
// drawn from a generator seeded by r (the same for the same r). Unlike
// Order's rotation, where a side always follows the same other side, a
// side follows every other side alike over many rounds: a side that
// leaves work behind it (a background commit, say) does not always slow
// the same neighbour.
func Shuffled(r, n int) []int {
	o := Order(0, n)
	rand.New(rand.NewPCG(uint64(r), 0x6d6370)).Shuffle(n, func(i, j int) { o[i], o[j] = o[j], o[i] })
	return o
}

// Alternate runs every side once per round for d each, in the order
// Order(r, len(sides)), after one unrecorded warm-up round of warmup per
// side (none when warmup is 0). It stops at the first error, naming the
// side.
func Alternate(sides []Side, rounds int, d, warmup time.Duration) (*Rounds, error) {
	res := &Rounds{Ops: make([]int, len(sides)), Time: make([]time.Duration, len(sides))}
	for _, s := range sides {
		res.Names = append(res.Names, s.Name)
	}
	if warmup > 0 {
		for _, s := range sides {
			if _, _, err := s.Run(warmup); err != nil {
				return nil, fmt.Errorf("%s (warm-up): %w", s.Name, err)
			}
		}
	}
	for r := range rounds {
		rates := make([]float64, len(sides))
		for _, k := range Order(r, len(sides)) {
			n, el, err := sides[k].Run(d)
			if err != nil {
				return nil, fmt.Errorf("%s (round %d): %w", sides[k].Name, r, err)
			}
			rates[k] = rate(n, el)
			res.Ops[k] += n
			res.Time[k] += el
		}
		res.Rates = append(res.Rates, rates)
	}
	return res, nil
}

func (r *Rounds) index(name string) int {
	for i, n := range r.Names {
		if n == name {
			return i
		}
	}
	panic("bench: no side named " + name)
}

// Rate is the spread of side name's per-round rate.
func (r *Rounds) Rate(name string) Spread {
	i := r.index(name)
	xs := make([]float64, len(r.Rates))
	for k, row := range r.Rates {
		xs[k] = row[i]
	}
	return Summarize(xs)
}

// Ratio is the spread over rounds of b's rate divided by a's rate in the
// same round (≥ 1: b is faster).
func (r *Rounds) Ratio(b, a string) Spread {
	ib, ia := r.index(b), r.index(a)
	xs := make([]float64, len(r.Rates))
	for k, row := range r.Rates {
		xs[k] = div(row[ib], row[ia])
	}
	return Summarize(xs)
}

// Parallel runs f on workers goroutines until d has passed; f(w, i) is
// worker w's i-th operation. It returns the operations completed and the
// time taken, or the first error.
func Parallel(workers int, d time.Duration, f func(w, i int) error) (int, time.Duration, error) {
	var n atomic.Int64
	var firstErr atomic.Value
	t0 := time.Now()
	stop := t0.Add(d)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := 0; time.Now().Before(stop); i++ {
				if err := f(w, i); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return 0, 0, err
	}
	return int(n.Load()), time.Since(t0), nil
}
