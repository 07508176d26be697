package guardtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/fencekit/fencekit/fence"
)

// Attempt is one recorded write attempt. Invoked and Completed are ticks of
// one logical clock shared by every writer of a run, taken just before Write
// is called and just after it returns: a.Completed < b.Invoked means a had
// returned before b was invoked (real-time order).
type Attempt struct {
	Writer    int
	Resource  string
	Token     fence.Token
	Value     string
	Invoked   int64
	Completed int64
	Err       error // nil: accepted
}

// outcome classifies an attempt.
type outcome int

const (
	accepted outcome = iota
	refused          // stale
	busy             // fence.ErrBusy: nothing happened
	failed           // anything else
)

func classify(err error) outcome {
	switch {
	case err == nil:
		return accepted
	case errors.Is(err, fence.ErrStale):
		return refused
	case errors.Is(err, fence.ErrBusy):
		return busy
	default:
		return failed
	}
}

// maxViolations bounds how many violations CheckHistory reports one by one.
const maxViolations = 10

// CheckHistory verifies a recorded history and the final states read after
// every attempt had completed (final maps each resource of the history to
// what Read returned). Values must be unique per (resource, token). It
// reports:
//
//   - an accepted write whose token is lower than that of a write accepted
//     and completed before it was invoked;
//   - a stale refusal whose *fence.StaleError does not name the presented
//     token and resource, or names a highest token that is not higher, or
//     that no accepted attempt on the resource presented and had invoked
//     before the refusal completed;
//   - an attempt that failed with an error that is neither stale nor busy;
//   - a final state other than the value and token of the highest accepted
//     token (or "not found" when nothing was accepted).
func CheckHistory(history []Attempt, final map[string]State) error {
	var errs []error
	total := 0
	report := func(format string, args ...any) {
		total++
		if total <= maxViolations {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}

	byRes := map[string][]Attempt{}
	for _, a := range history {
		if a.Completed <= a.Invoked {
			report("attempt %+v: completed tick %d not after invoked tick %d", a, a.Completed, a.Invoked)
		}
		byRes[a.Resource] = append(byRes[a.Resource], a)
	}
	resources := make([]string, 0, len(byRes))
	for r := range byRes {
		resources = append(resources, r)
	}
	sort.Strings(resources)

	for _, r := range resources {
		as := byRes[r]
		var acc []Attempt
		for _, a := range as {
			switch classify(a.Err) {
			case accepted:
				acc = append(acc, a)
			case failed:
				report("%q token %d: unexpected error (neither stale nor busy): %v", r, a.Token, a.Err)
			}
		}
		// Accepted attempts by completion; prefix maximum of their tokens.
		sort.Slice(acc, func(i, j int) bool { return acc[i].Completed < acc[j].Completed })
		prefMax := make([]Attempt, len(acc))
		for i, a := range acc {
			prefMax[i] = a
			if i > 0 && prefMax[i-1].Token > a.Token {
				prefMax[i] = prefMax[i-1]
			}
		}
		// maxBefore returns the accepted attempt with the highest token
		// among those completed before tick, if any.
		maxBefore := func(tick int64) (Attempt, bool) {
			n := sort.Search(len(acc), func(i int) bool { return acc[i].Completed >= tick })
			if n == 0 {
				return Attempt{}, false
			}
			return prefMax[n-1], true
		}
		for _, w := range acc {
			if prev, ok := maxBefore(w.Invoked); ok && prev.Token > w.Token {
				report("%q: token %d (writer %d, invoked at %d) was accepted although token %d (writer %d) had been accepted, completing at %d",
					r, w.Token, w.Writer, w.Invoked, prev.Token, prev.Writer, prev.Completed)
			}
		}
		for _, s := range as {
			if classify(s.Err) != refused {
				continue
			}
			se, ok := fence.IsStale(s.Err)
			if !ok {
				report("%q token %d: error %q matches ErrStale but is not a *fence.StaleError", r, s.Token, s.Err)
				continue
			}
			if se.Presented != s.Token || se.Resource != r {
				report("%q token %d: StaleError names resource %q and presented token %d", r, s.Token, se.Resource, se.Presented)
			}
			if se.Highest <= s.Token {
				report("%q token %d refused as stale with highest %d, which is not higher", r, s.Token, se.Highest)
				continue
			}
			justified := false
			for _, a := range acc {
				if a.Token == se.Highest && a.Invoked < s.Completed {
					justified = true
					break
				}
			}
			if !justified {
				report("%q token %d (writer %d) refused as stale with highest %d, but no accepted write with token %d was invoked before the refusal completed",
					r, s.Token, s.Writer, se.Highest, se.Highest)
			}
		}
		want := State{}
		for _, a := range acc {
			if !want.Found || a.Token > want.Token {
				want = found(a.Value, a.Token)
			}
		}
		got, ok := final[r]
		if !ok {
			report("%q: no final state recorded", r)
		} else if got != want {
			report("%q: final state %s, want %s (the highest accepted token)", r, got, want)
		}
	}
	if total > maxViolations {
		errs = append(errs, fmt.Errorf("... and %d more violations", total-maxViolations))
	}
	return errors.Join(errs...)
}

// Workload returns, for each writer, the (resource, token) pairs it attempts
// in order. For each resource, round j hands the tokens j*writers+1 ..
// (j+1)*writers to the writers in a random order, and each writer visits
// the resources of a round in a random order, so writers race within a
// round and drift apart across rounds (a slow writer presents old tokens).
func Workload(rng *rand.Rand, resources []string, writers, rounds int) [][]Attempt {
	plan := make([][]Attempt, writers)
	for j := 0; j < rounds; j++ {
		perms := make([][]int, len(resources))
		for k := range resources {
			perms[k] = rng.Perm(writers)
		}
		for w := 0; w < writers; w++ {
			for _, k := range rng.Perm(len(resources)) {
				tok := fence.Token(j*writers + perms[k][w] + 1)
				plan[w] = append(plan[w], Attempt{
					Writer:   w,
					Resource: resources[k],
					Token:    tok,
					Value:    fmt.Sprintf("w%d-t%d", w, tok),
				})
			}
		}
	}
	return plan
}

// RunHistory executes plan (one goroutine per writer, all released at once)
// against s, records every attempt, then reads the final state of each
// resource.
func RunHistory(ctx context.Context, s Subject, plan [][]Attempt) ([]Attempt, map[string]State, error) {
	var clock atomic.Int64
	start := make(chan struct{})
	var wg sync.WaitGroup
	out := make([][]Attempt, len(plan))
	for w := range plan {
		out[w] = make([]Attempt, 0, len(plan[w]))
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for _, a := range plan[w] {
				if ctx.Err() != nil {
					return
				}
				a.Invoked = clock.Add(1)
				a.Err = s.Write(ctx, a.Resource, a.Token, a.Value)
				a.Completed = clock.Add(1)
				out[w] = append(out[w], a)
			}
		}()
	}
	close(start)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("history run did not finish: %w", err)
	}
	var history []Attempt
	final := map[string]State{}
	for _, as := range out {
		history = append(history, as...)
		for _, a := range as {
			final[a.Resource] = State{}
		}
	}
	for r := range final {
		v, tok, ok, err := s.Read(ctx, r)
		if err != nil {
			return nil, nil, fmt.Errorf("final Read(%q): %w", r, err)
		}
		if ok {
			final[r] = found(v, tok)
		}
	}
	return history, final, nil
}

// CheckConcurrent runs cfg.Writers goroutines over cfg.Resources resources
// with cfg.Rounds interleaved, shuffled tokens each (see Workload), records
// the history and verifies it with CheckHistory. It also requires that some
// writes were accepted and some refused, so the run exercised both paths.
func CheckConcurrent(ctx context.Context, s Subject, cfg Config) error {
	resources := make([]string, cfg.Resources)
	for i := range resources {
		resources[i] = resourceName(cfg, "concurrent", i)
	}
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	history, final, err := RunHistory(ctx, s, Workload(rng, resources, cfg.Writers, cfg.Rounds))
	if err != nil {
		return err
	}
	if err := CheckHistory(history, final); err != nil {
		return err
	}
	var nAcc, nRef int
	for _, a := range history {
		switch classify(a.Err) {
		case accepted:
			nAcc++
		case refused:
			nRef++
		}
	}
	if nAcc == 0 {
		return fmt.Errorf("no write of %d was accepted", len(history))
	}
	if nRef == 0 && cfg.Writers > 1 {
		// With several writers racing over shuffled tokens, a guard that
		// never refuses is not checking anything. (Possible only if the
		// scheduler ran every round strictly in token order.)
		return fmt.Errorf("none of %d concurrent writes was refused as stale; the guard admits everything or the run had no contention", len(history))
	}
	return nil
}
