package bench

import (
	"math"
	"slices"
	"time"
)

// Spread is the distribution of one figure over the rounds of a run.
type Spread struct {
	Min, Median, Max float64
	N                int // samples (rounds)
}

// Summarize returns the spread of samples, ignoring NaN and infinite
// values; all fields NaN (N = 0) when none is left. The median of an even
// count is the mean of the two middle values. samples is not modified.
func Summarize(samples []float64) Spread {
	s := make([]float64, 0, len(samples))
	for _, v := range samples {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			s = append(s, v)
		}
	}
	if len(s) == 0 {
		return Spread{Min: math.NaN(), Median: math.NaN(), Max: math.NaN()}
	}
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Spread{Min: s[0], Median: med, Max: s[len(s)-1], N: len(s)}
}

// Interval is a span of wall time, [Start, End).
type Interval struct{ Start, End time.Time }

// BusyTime returns how much of [from, to) is covered by at least one of
// the intervals (their union, clipped to the window): the wall time during
// which some statement was in flight, however many ran at once.
func BusyTime(iv []Interval, from, to time.Time) time.Duration {
	c := make([]Interval, 0, len(iv))
	for _, x := range iv {
		s, e := maxTime(x.Start, from), minTime(x.End, to)
		if e.After(s) {
			c = append(c, Interval{s, e})
		}
	}
	slices.SortFunc(c, func(a, b Interval) int { return a.Start.Compare(b.Start) })
	var busy time.Duration
	var cur Interval
	for i, x := range c {
		switch {
		case i == 0:
			cur = x
		case !x.Start.After(cur.End):
			cur.End = maxTime(cur.End, x.End)
		default:
			busy += cur.End.Sub(cur.Start)
			cur = x
		}
	}
	if len(c) > 0 {
		busy += cur.End.Sub(cur.Start)
	}
	return busy
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
