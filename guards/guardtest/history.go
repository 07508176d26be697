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

// plannedAttempt is one recorded write attempt. Invoked and Completed are ticks of
// one logical clock shared by every writer of a run, taken just before Write
// is called and just after it returns: a.Completed < b.Invoked means a had
// returned before b was invoked (real-time order).
type plannedAttempt struct {
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

// maxViolations bounds how many violations checkHistory reports one by one.
const maxViolations = 10

// observation is one Read by a concurrent reader, with the same clock ticks
// as plannedAttempt.
type observation struct {
	Reader    int
	Resource  string
	State     resState
	Invoked   int64
	Completed int64
	Err       error
}

// concHistory is what runHistory records: every write attempt, every concurrent
// read, and the final state of each resource read after all writers had
// finished.
type concHistory struct {
	Attempts []plannedAttempt
	Reads    []observation
	Final    map[string]resState
}

// checkHistory verifies a recorded history. Values must be unique per
// (resource, token). It reports:
//
//   - an accepted write whose token is lower than that of a write accepted
//     and completed before it was invoked (FindStaleAcceptances);
//   - a stale refusal whose *fence.StaleError does not name the presented
//     token and resource, or names a highest token that is not higher, or
//     that no accepted attempt on the resource presented and had invoked
//     before the refusal completed;
//   - an attempt that failed with an error that is neither stale nor busy;
//   - a concurrent read that failed, that returned a value no accepted
//     attempt with that token wrote (or one invoked only after the read
//     completed), that returned an older token than a write accepted before
//     the read was invoked, or an older token than a read completed before
//     it was invoked (reads must not go back in time);
//   - a final state other than the value and token of the highest accepted
//     token (or "not found" when nothing was accepted).
func checkHistory(h concHistory) error {
	history, final := h.Attempts, h.Final
	var errs []error
	total := 0
	report := func(format string, args ...any) {
		total++
		if total <= maxViolations {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}

	readsByRes := map[string][]observation{}
	for _, o := range h.Reads {
		readsByRes[o.Resource] = append(readsByRes[o.Resource], o)
	}
	byRes := map[string][]plannedAttempt{}
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
		var acc []plannedAttempt
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
		accByToken := map[fence.Token][]plannedAttempt{}
		for _, a := range acc {
			accByToken[a.Token] = append(accByToken[a.Token], a)
		}
		prefMax := make([]plannedAttempt, len(acc))
		for i, a := range acc {
			prefMax[i] = a
			if i > 0 && prefMax[i-1].Token > a.Token {
				prefMax[i] = prefMax[i-1]
			}
		}
		// maxBefore returns the accepted attempt with the highest token
		// among those completed before tick, if any.
		maxBefore := func(tick int64) (plannedAttempt, bool) {
			n := sort.Search(len(acc), func(i int) bool { return acc[i].Completed >= tick })
			if n == 0 {
				return plannedAttempt{}, false
			}
			return prefMax[n-1], true
		}
		aw := make([]AcceptedWrite, len(acc))
		for i, a := range acc {
			aw[i] = AcceptedWrite{Token: a.Token, Invoked: a.Invoked, Completed: a.Completed}
		}
		for _, v := range FindStaleAcceptances(aw) {
			w, prev := acc[v.Later], acc[v.Earlier]
			report("%q: token %d (writer %d, invoked at %d) was accepted although token %d (writer %d) had been accepted, completing at %d",
				r, w.Token, w.Writer, w.Invoked, prev.Token, prev.Writer, prev.Completed)
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
			for _, a := range accByToken[se.Highest] {
				if a.Invoked < s.Completed {
					justified = true
					break
				}
			}
			if !justified {
				report("%q token %d (writer %d) refused as stale with highest %d, but no accepted write with token %d was invoked before the refusal completed",
					r, s.Token, s.Writer, se.Highest, se.Highest)
			}
		}
		var reads []observation
		for _, o := range readsByRes[r] {
			if o.Err != nil {
				report("%q: concurrent Read failed: %v", r, o.Err)
				continue
			}
			reads = append(reads, o)
		}
		for _, o := range reads {
			if o.Completed <= o.Invoked {
				report("read %+v: completed tick %d not after invoked tick %d", o, o.Completed, o.Invoked)
			}
			prev, ok := maxBefore(o.Invoked)
			if !o.State.Found {
				if ok {
					report("%q: read (invoked at %d) found nothing after token %d had been accepted (completed at %d)", r, o.Invoked, prev.Token, prev.Completed)
				}
				continue
			}
			if ok && o.State.Token < prev.Token {
				report("%q: read (invoked at %d) returned token %d after token %d had been accepted (completed at %d)", r, o.Invoked, o.State.Token, prev.Token, prev.Completed)
			}
			wrote := false
			for _, a := range accByToken[o.State.Token] {
				if a.Value == o.State.Value && a.Invoked < o.Completed {
					wrote = true
					break
				}
			}
			if !wrote {
				report("%q: read (completed at %d) returned %s, which no accepted write invoked before it stored", r, o.Completed, o.State)
			}
		}
		sort.Slice(reads, func(i, j int) bool { return reads[i].Completed < reads[j].Completed })
		var best observation
		j := 0
		byInvoked := append([]observation(nil), reads...)
		sort.Slice(byInvoked, func(i, j int) bool { return byInvoked[i].Invoked < byInvoked[j].Invoked })
		for _, o := range byInvoked {
			for ; j < len(reads) && reads[j].Completed < o.Invoked; j++ {
				if reads[j].State.Found && (!best.State.Found || reads[j].State.Token > best.State.Token) {
					best = reads[j]
				}
			}
			if best.State.Found && (!o.State.Found || o.State.Token < best.State.Token) {
				report("%q: read (invoked at %d) returned %s after an earlier read (completed at %d) had returned token %d", r, o.Invoked, o.State, best.Completed, best.State.Token)
			}
		}
		want := resState{}
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

// workload returns, for each writer, the (resource, token) pairs it attempts
// in order. For each resource, round j hands the tokens j*writers+1 ..
// (j+1)*writers to the writers in a random order, and each writer visits
// the resources of a round in a random order, so writers race within a
// round and drift apart across rounds (a slow writer presents old tokens).
func workload(rng *rand.Rand, resources []string, writers, rounds int) [][]plannedAttempt {
	plan := make([][]plannedAttempt, writers)
	for j := 0; j < rounds; j++ {
		perms := make([][]int, len(resources))
		for k := range resources {
			perms[k] = rng.Perm(writers)
		}
		for w := 0; w < writers; w++ {
			for _, k := range rng.Perm(len(resources)) {
				tok := fence.Token(j*writers + perms[k][w] + 1)
				plan[w] = append(plan[w], plannedAttempt{
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

// runHistory executes plan (one goroutine per writer, all released at once)
// against s while readers goroutines read the plan's resources in a loop,
// records every attempt and read, and once every writer has finished reads
// the final state of each resource.
func runHistory(ctx context.Context, s Subject, plan [][]plannedAttempt, readers int) (concHistory, error) {
	var clock atomic.Int64
	start := make(chan struct{})
	writersDone := make(chan struct{})
	var resources []string
	seen := map[string]bool{}
	total := 0
	for _, as := range plan {
		total += len(as)
		for _, a := range as {
			if !seen[a.Resource] {
				seen[a.Resource] = true
				resources = append(resources, a.Resource)
			}
		}
	}
	var writers, readersWG sync.WaitGroup
	out := make([][]plannedAttempt, len(plan))
	for w := range plan {
		out[w] = make([]plannedAttempt, 0, len(plan[w]))
		writers.Add(1)
		go func() {
			defer writers.Done()
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
	obs := make([][]observation, readers)
	for rd := 0; rd < readers && len(resources) > 0; rd++ {
		readersWG.Add(1)
		go func() {
			defer readersWG.Done()
			<-start
			// Bounded, so readers of a fast store do not pile up memory.
			for i := 0; i < total; i++ {
				select {
				case <-writersDone:
					return
				default:
				}
				if ctx.Err() != nil {
					return
				}
				o := observation{Reader: rd, Resource: resources[(i+rd)%len(resources)]}
				o.Invoked = clock.Add(1)
				v, tok, ok, err := s.Read(ctx, o.Resource)
				o.Completed = clock.Add(1)
				if ctx.Err() != nil && err != nil {
					return // cancelled mid-read; reported below
				}
				o.Err = err
				if ok {
					o.State = found(v, tok)
				}
				obs[rd] = append(obs[rd], o)
			}
		}()
	}
	close(start)
	writers.Wait()
	close(writersDone)
	readersWG.Wait()
	if err := ctx.Err(); err != nil {
		return concHistory{}, fmt.Errorf("history run did not finish: %w", err)
	}
	h := concHistory{Final: map[string]resState{}}
	for _, as := range out {
		h.Attempts = append(h.Attempts, as...)
	}
	for _, os := range obs {
		h.Reads = append(h.Reads, os...)
	}
	for _, r := range resources {
		v, tok, ok, err := s.Read(ctx, r)
		if err != nil {
			return concHistory{}, fmt.Errorf("final Read(%q): %w", r, err)
		}
		h.Final[r] = resState{}
		if ok {
			h.Final[r] = found(v, tok)
		}
	}
	return h, nil
}

// CheckConcurrent runs cfg.Writers goroutines over cfg.Resources resources
// with cfg.Rounds interleaved, shuffled tokens each (see workload), and
// cfg.Readers concurrent readers, records the history and verifies it with
// checkHistory. It also requires that some
// writes were accepted and some refused, so the run exercised both paths.
func CheckConcurrent(ctx context.Context, s Subject, cfg Config) error {
	resources := make([]string, cfg.Resources)
	for i := range resources {
		resources[i] = resourceName(cfg, "concurrent", i)
	}
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	h, err := runHistory(ctx, s, workload(rng, resources, cfg.Writers, cfg.Rounds), cfg.Readers)
	if err != nil {
		return err
	}
	if err := checkHistory(h); err != nil {
		return err
	}
	var nAcc, nRef, nBusy int
	for _, a := range h.Attempts {
		switch classify(a.Err) {
		case accepted:
			nAcc++
		case refused:
			nRef++
		case busy:
			nBusy++
		}
	}
	if cfg.Logf != nil {
		cfg.Logf("guardtest: %d writes over %d resources by %d writers: %d accepted, %d stale, %d busy; %d concurrent reads",
			len(h.Attempts), len(resources), cfg.Writers, nAcc, nRef, nBusy, len(h.Reads))
	}
	if nAcc == 0 {
		return fmt.Errorf("no write of %d was accepted", len(h.Attempts))
	}
	if nRef == 0 && cfg.Writers > 1 {
		// With several writers racing over shuffled tokens, a guard that
		// never refuses is not checking anything. (Possible only if the
		// scheduler ran every round strictly in token order.)
		return fmt.Errorf("none of %d concurrent writes was refused as stale; the guard admits everything or the run had no contention", len(h.Attempts))
	}
	return nil
}
