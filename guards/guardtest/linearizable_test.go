package guardtest_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardtest"
)

// reportStaleApplied makes remoteSubject's WriteDelayed deliver the held
// copy straight to the store, without the guard's check: a late copy with a
// token below the mark by then is applied.
const reportStaleApplied = "held copy applied without the fence"

// logs collects what a check logs.
type logs struct {
	mu    sync.Mutex
	lines []string
}

func (l *logs) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// The reference remote subject (held replies reported as unknown or
// settled, delayed duplicates consumed once) passes, with both faults run.
func TestLinearizableReferencePasses(t *testing.T) {
	for _, report := range []string{reportUnknown, reportSettled} {
		t.Run(report, func(t *testing.T) {
			for range 3 {
				var l logs
				cfg := defaults(t)
				cfg.Logf = l.logf
				require.NoError(t, guardtest.CheckLinearizable(context.Background(), newRemote(report), cfg))
				out := l.String()
				t.Log(out)
				assert.NotContains(t, out, "without")
				assert.NotContains(t, out, " 0 held", "no write was held")
				assert.NotContains(t, out, " 0 delayed", "no write was delayed")
			}
		})
	}
}

// A Subject with neither fault interface still gets the fault-free check,
// and the skipped faults are logged; without a ClaimWriter too.
func TestLinearizableWithoutFaultInterfaces(t *testing.T) {
	for name, tc := range map[string]struct {
		s    guardtest.Subject
		logs []string
	}{
		"claims": {newRefSubject(), []string{
			"without held replies (no guardtest.OutcomeWriter), delayed duplicates (no guardtest.DuplicateWriter)"}},
		"no claims": {fenceOnlySubject{guardtest.FromGuard(fenceOnly{newRef()}, guardtest.NewMapStore())}, []string{
			"run identities on plain writes (no guardtest.ClaimWriter)"}},
	} {
		t.Run(name, func(t *testing.T) {
			var l logs
			cfg := defaults(t)
			cfg.Logf = l.logf
			require.NoError(t, guardtest.CheckLinearizable(context.Background(), tc.s, cfg))
			for _, want := range tc.logs {
				assert.Contains(t, l.String(), want)
			}
			assert.Contains(t, l.String(), "(0 held, 0 delayed)")
		})
	}
}

// untilCaught runs check until it fails (at most runs times) and returns
// its error and the number of runs.
func untilCaught(runs int, check func() error) (int, error) {
	for i := 1; i <= runs; i++ {
		if err := check(); err != nil {
			return i, err
		}
	}
	return runs, nil
}

// The check catches subjects that are broken only under faults, and
// guards that are broken without them.
func TestLinearizableDetectsBrokenSubjects(t *testing.T) {
	cfg := defaults(t)
	for name, tc := range map[string]struct {
		s    func() guardtest.Subject
		want string
	}{
		"held copy re-applied after a later write of its run": {func() guardtest.Subject { return newRemote(reportReapplied) }, "not linearizable"},
		"held copy applied without the fence (stale applied)": {func() guardtest.Subject { return newRemote(reportStaleApplied) }, "not linearizable"},
		"success reported for a held write never applied":     {func() guardtest.Subject { return newRemote(reportLie) }, "not linearizable"},
		"nothing written reported for an applied held write":  {func() guardtest.Subject { return newRemote(reportNothing) }, "unexpected error"},
		"a hold that never catches the reply":                 {func() guardtest.Subject { return newRemote(reportNoSignal) }, "hold never caught"},
		"check then write": {func() guardtest.Subject {
			return guardtest.FromGuard(&checkThenWriteMax{refGuard: *newRef()}, guardtest.NewMapStore())
		}, "not linearizable"},
		"accept all": {func() guardtest.Subject { return guardtest.FromGuard(acceptAll{}, guardtest.NewMapStore()) }, "not linearizable"},
	} {
		t.Run(name, func(t *testing.T) {
			runs, err := untilCaught(30, func() error {
				return guardtest.CheckLinearizable(context.Background(), tc.s(), cfg)
			})
			require.Error(t, err, "passed %d runs", runs)
			assert.Contains(t, err.Error(), tc.want)
			t.Logf("caught after %d run(s): %.2000s", runs, err)
		})
	}
}

func TestLinearizablePlan(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	res := []string{"a", "b", "c"}
	faults := []guardtest.Fault{guardtest.FaultHeld, guardtest.FaultDelayed}
	plan := guardtest.LinearizablePlan(rng, res, 8, 6, 4, faults, true)
	require.Len(t, plan, 8)
	values := map[string]bool{}
	n := map[guardtest.Fault]int{}
	var reissued, runless, repeats int
	for w, ps := range plan {
		for i, p := range ps {
			require.False(t, values[p.Value], "value %q twice", p.Value)
			values[p.Value] = true
			require.NoError(t, p.Claim.Validate())
			n[p.Fault]++
			switch {
			case p.Claim.Run == "":
				runless++
			case !strings.HasSuffix(p.Claim.Run, fmt.Sprintf(".w%d", w)):
				reissued++
			}
			if i > 0 && ps[i-1].Claim == p.Claim && ps[i-1].Resource == p.Resource {
				repeats++
			}
			switch p.Fault {
			case guardtest.FaultHeld:
				assert.Empty(t, p.Claim.Run, "a held write presents no run")
			case guardtest.FaultDelayed:
				require.Less(t, i+1, len(ps), "a delayed write is the writer's last")
				assert.Equal(t, p.Claim, ps[i+1].Claim, "a delayed write is followed by one of its claim")
				assert.Equal(t, p.Resource, ps[i+1].Resource)
				assert.Equal(t, guardtest.FaultNone, ps[i+1].Fault)
			}
		}
	}
	assert.Positive(t, n[guardtest.FaultHeld])
	assert.Positive(t, n[guardtest.FaultDelayed])
	assert.Positive(t, reissued)
	assert.Positive(t, runless)
	assert.Positive(t, repeats)
	t.Logf("%d writes: %v faults, %d re-issued, %d without a run, %d repeats", len(values), n, reissued, runless, repeats)

	// Without faults, none; with one write in a thousand, still one.
	for _, ps := range guardtest.LinearizablePlan(rng, res, 8, 6, 4, nil, true) {
		for _, p := range ps {
			assert.Equal(t, guardtest.FaultNone, p.Fault)
		}
	}
	got := 0
	for _, ps := range guardtest.LinearizablePlan(rng, res, 2, 1, 1000, faults[1:], false) {
		for i, p := range ps {
			assert.Empty(t, p.Claim.Run)
			if p.Fault == guardtest.FaultDelayed {
				got++
				require.Less(t, i+1, len(ps))
				assert.Equal(t, p.Claim, ps[i+1].Claim)
			}
		}
	}
	assert.Equal(t, 1, got)
}

func TestCheckLinearizableHistory(t *testing.T) {
	const A, B = "run-a", "run-b"
	seq := 0
	wr := func(f guardtest.Fault, tok fence.Token, run string, inv, comp int64, err error) guardtest.LinearWrite {
		seq++
		return guardtest.LinearWrite{Seq: seq, Resource: "r", Claim: fence.Claim{Token: tok, Run: run},
			Value: fmt.Sprintf("v%d", seq), Fault: f, Invoked: inv, Completed: comp, Err: err}
	}
	delivered := func(w guardtest.LinearWrite, at int64) guardtest.LinearWrite { w.Delivered = at; return w }
	applied := func(w guardtest.LinearWrite) guardtest.LinearWrite { w.Applied = true; return w }
	read := func(v string, tok fence.Token, inv, comp int64) guardtest.Observation {
		o := guardtest.Observation{Reader: 9, Resource: "r", Invoked: inv, Completed: comp}
		if v != "" {
			o.State = guardtest.State{Value: v, Token: tok, Found: true}
		}
		return o
	}
	unknown := fence.OutcomeUnknown(context.Background(), "test: commit", "r", errors.New("reply lost"))
	notApplied := &fence.NotAppliedError{Op: "test: put", Resource: "r", Err: errors.New("reply lost")}
	overtaken := &fence.StaleError{Resource: "r", Presented: 3, Highest: 5, Overtaken: true}
	plain, held, delayed := guardtest.FaultNone, guardtest.FaultHeld, guardtest.FaultDelayed
	for _, tc := range []struct {
		name   string
		writes func() []guardtest.LinearWrite
		reads  []guardtest.Observation
		want   string
	}{
		{"sequential", func() []guardtest.LinearWrite {
			return []guardtest.LinearWrite{wr(plain, 3, A, 1, 2, nil), wr(plain, 5, B, 3, 4, nil), wr(plain, 4, A, 5, 6, stale("r", 4, 5))}
		}, []guardtest.Observation{read("v2", 5, 7, 8)}, ""},
		{"a value goes back", func() []guardtest.LinearWrite {
			return []guardtest.LinearWrite{wr(plain, 5, A, 1, 2, nil), wr(plain, 5, A, 3, 4, nil)}
		}, []guardtest.Observation{read("v1", 5, 5, 6)}, "not linearizable"},
		{"delayed copy of an unknown write applied after a later write of its run", func() []guardtest.LinearWrite {
			return []guardtest.LinearWrite{delivered(wr(delayed, 5, A, 1, 2, unknown), 7), wr(plain, 5, A, 3, 4, nil)}
		}, []guardtest.Observation{read("v2", 5, 5, 6), read("v1", 5, 8, 9)}, "not linearizable"},
		{"delayed unknown write applied before the later write", func() []guardtest.LinearWrite {
			return []guardtest.LinearWrite{delivered(wr(delayed, 5, A, 1, 2, unknown), 7), wr(plain, 5, A, 3, 4, nil)}
		}, []guardtest.Observation{read("v1", 5, 2, 3), read("v2", 5, 8, 9)}, ""},
		{"delayed unknown write applied after its delivery", func() []guardtest.LinearWrite {
			return []guardtest.LinearWrite{delivered(wr(delayed, 5, A, 1, 2, unknown), 3)}
		}, []guardtest.Observation{read("", 0, 4, 5), read("v1", 5, 6, 7)}, "not linearizable"},
		{"another run's copy at the same token is refused", func() []guardtest.LinearWrite {
			return []guardtest.LinearWrite{wr(plain, 5, A, 1, 2, nil), wr(plain, 5, B, 3, 4, nil)}
		}, nil, "not linearizable"},
		{"reuse refused", func() []guardtest.LinearWrite {
			return []guardtest.LinearWrite{wr(plain, 5, A, 1, 2, nil), wr(plain, 5, "", 3, 4, nil), wr(plain, 5, B, 5, 6, &fence.ReusedError{})}
		}, []guardtest.Observation{read("v2", 5, 7, 8)}, ""},
		{"reuse claimed with no mark", func() []guardtest.LinearWrite {
			return []guardtest.LinearWrite{wr(plain, 5, B, 5, 6, &fence.ReusedError{})}
		}, nil, "refused as reused, but no write with its token and another run"},
		{"reuse claimed after a write of the same run", func() []guardtest.LinearWrite {
			return []guardtest.LinearWrite{wr(plain, 5, B, 1, 2, nil), wr(plain, 5, B, 5, 6, &fence.ReusedError{})}
		}, nil, "refused as reused"},
		{"stale with nothing higher", func() []guardtest.LinearWrite {
			return []guardtest.LinearWrite{wr(plain, 3, A, 1, 2, stale("r", 3, 5))}
		}, nil, "refused as stale, but no write with a higher token"},
		{"stale naming a write invoked after it", func() []guardtest.LinearWrite {
			return []guardtest.LinearWrite{wr(plain, 3, A, 1, 2, stale("r", 3, 5)), wr(plain, 5, A, 3, 4, nil)}
		}, nil, "refused as stale"},
		{"stale justified by a busy write", func() []guardtest.LinearWrite {
			return []guardtest.LinearWrite{wr(plain, 5, A, 1, 4, fence.ErrBusy), wr(plain, 3, A, 2, 3, stale("r", 3, 5))}
		}, nil, "refused as stale"},
		{"stale justified by an unknown write", func() []guardtest.LinearWrite {
			return []guardtest.LinearWrite{wr(plain, 5, A, 1, 4, unknown), wr(plain, 3, A, 2, 3, stale("r", 3, 5))}
		}, nil, ""},
		{"overtaken write applied, then overwritten", func() []guardtest.LinearWrite {
			return []guardtest.LinearWrite{wr(plain, 3, A, 1, 6, overtaken), wr(plain, 5, B, 3, 4, nil)}
		}, []guardtest.Observation{read("v1", 3, 2, 3), read("v2", 5, 7, 8)}, ""},
		{"overtaken write applied after it returned", func() []guardtest.LinearWrite {
			return []guardtest.LinearWrite{wr(plain, 5, B, 1, 2, nil), wr(plain, 3, A, 3, 4, overtaken)}
		}, []guardtest.Observation{read("v2", 5, 5, 6), read("v2", 3, 7, 8)}, "not linearizable"},
		{"settled not applied, yet applied", func() []guardtest.LinearWrite {
			return []guardtest.LinearWrite{delivered(wr(delayed, 5, A, 1, 2, notApplied), 3)}
		}, []guardtest.Observation{read("v1", 5, 4, 5)}, "not linearizable"},
		{"busy, yet applied", func() []guardtest.LinearWrite {
			return []guardtest.LinearWrite{wr(plain, 5, A, 1, 2, fence.ErrBusy)}
		}, []guardtest.Observation{read("v1", 5, 4, 5)}, "not linearizable"},
		{"plain unknown write applied any time later", func() []guardtest.LinearWrite {
			return []guardtest.LinearWrite{wr(plain, 5, "", 1, 2, unknown)}
		}, []guardtest.Observation{read("", 0, 3, 4), read("v1", 5, 5, 6)}, ""},
		{"held unknown write applied after it returned", func() []guardtest.LinearWrite {
			return []guardtest.LinearWrite{applied(wr(held, 5, "", 1, 2, unknown))}
		}, []guardtest.Observation{read("", 0, 3, 4), read("v1", 5, 5, 6)}, "not linearizable"},
		{"held unknown write never applied", func() []guardtest.LinearWrite {
			return []guardtest.LinearWrite{applied(wr(held, 5, "", 1, 2, unknown))}
		}, []guardtest.Observation{read("", 0, 3, 4)}, ""},
		{"success without effect", func() []guardtest.LinearWrite {
			return []guardtest.LinearWrite{applied(wr(held, 5, "", 1, 2, nil))}
		}, []guardtest.Observation{read("", 0, 3, 4)}, "not linearizable"},
		{"unexpected error", func() []guardtest.LinearWrite {
			return []guardtest.LinearWrite{wr(plain, 5, "", 1, 2, context.Canceled)}
		}, nil, "unexpected error"},
		{"subject violation", func() []guardtest.LinearWrite {
			w := wr(delayed, 5, "", 1, 2, nil)
			w.Violation = "delivering the held copy: boom"
			return []guardtest.LinearWrite{w}
		}, nil, "boom"},
		{"failed read", nil, []guardtest.Observation{{Resource: "r", Invoked: 1, Completed: 2, Err: errors.New("io")}}, "Read failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ws []guardtest.LinearWrite
			seq = 0 // values v1, v2, ... in each case
			if tc.writes != nil {
				ws = tc.writes()
			}
			err := guardtest.CheckLinearizableHistory(guardtest.LinearHistory{Writes: ws, Reads: tc.reads}, time.Minute)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// countingSubject records how many faulted writes are in flight per
// resource (a delayed one until its copy's delivery returned) and in all.
type countingSubject struct {
	*remoteSubject
	mu       sync.Mutex
	inFlight map[string]int
	total    int
	maxTotal int
	overlaps []string
}

func (s *countingSubject) enter(r string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inFlight[r]++
	s.total++
	s.maxTotal = max(s.maxTotal, s.total)
	if s.inFlight[r] > 1 {
		s.overlaps = append(s.overlaps, r)
	}
}

func (s *countingSubject) leave(r string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inFlight[r]--
	s.total--
}

func (s *countingSubject) WriteHeld(ctx context.Context, r string, tok fence.Token, v string, applied func()) error {
	s.enter(r)
	defer s.leave(r)
	return s.remoteSubject.WriteHeld(ctx, r, tok, v, applied)
}

func (s *countingSubject) WriteDelayed(ctx context.Context, r string, c fence.Claim, v string) (func(context.Context) error, error) {
	s.enter(r)
	deliver, err := s.remoteSubject.WriteDelayed(ctx, r, c, v)
	return func(ctx context.Context) error {
		defer s.leave(r)
		return deliver(ctx)
	}, err
}

// Faulted writes run concurrently on different resources, never two at a
// time on one resource (a delayed one's until its delivery returned).
func TestLinearizableFaultsOnePerResource(t *testing.T) {
	cfg := defaults(t)
	cfg.Writers, cfg.FaultEvery = 8, 1 // every write faulted where the resource is free
	maxTotal := 0
	for range 3 {
		s := &countingSubject{remoteSubject: newRemote(reportUnknown), inFlight: map[string]int{}}
		require.NoError(t, guardtest.CheckLinearizable(context.Background(), s, cfg))
		assert.Empty(t, s.overlaps, "two faulted writes at once on one resource")
		maxTotal = max(maxTotal, s.maxTotal)
	}
	assert.Greater(t, maxTotal, 1, "faulted writes never ran concurrently")
	t.Logf("at most %d faulted writes in flight at once", maxTotal)
}

// nothingHeldSubject's deliver reports guardtest.ErrNothingHeld: for every
// delayed write (all), or only for the refused ones (refusedOnly), as a
// guard that refuses from a read before committing would.
type nothingHeldSubject struct {
	*remoteSubject
	refusedOnly bool
}

func (s nothingHeldSubject) WriteDelayed(ctx context.Context, r string, c fence.Claim, v string) (func(context.Context) error, error) {
	deliver, err := s.remoteSubject.WriteDelayed(ctx, r, c, v)
	return func(ctx context.Context) error {
		if derr := deliver(ctx); derr != nil {
			return derr
		}
		if s.refusedOnly && err == nil {
			return nil
		}
		return fmt.Errorf("no request left: %w", guardtest.ErrNothingHeld)
	}, err
}

// ErrNothingHeld is accepted for refused writes only: a write that reported
// success must have sent the request the subject claims it did not hold.
func TestLinearizableNothingHeld(t *testing.T) {
	cfg := defaults(t)
	for range 3 {
		require.NoError(t, guardtest.CheckLinearizable(context.Background(),
			nothingHeldSubject{newRemote(reportUnknown), true}, cfg))
	}
	runs, err := untilCaught(30, func() error {
		return guardtest.CheckLinearizable(context.Background(), nothingHeldSubject{newRemote(reportUnknown), false}, cfg)
	})
	require.Error(t, err, "passed %d runs", runs)
	assert.Contains(t, err.Error(), "no committing request was held")
}
