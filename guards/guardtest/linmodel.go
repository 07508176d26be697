package guardtest

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencekit/fencekit/fence"
)

// Outcomes of a write in a linearHistory.
const (
	outcomeOK         = "ok"
	outcomeStale      = "stale"
	outcomeOvertaken  = "stale (overtaken)"
	outcomeReused     = "reused"
	outcomeBusy       = "busy"
	outcomeNotApplied = "not applied"
	outcomeUnknown    = "outcome unknown"
	outcomeUnexpected = "unexpected error"
)

// writeOutcome classifies the error of a write.
func writeOutcome(err error) string {
	switch {
	case err == nil:
		return outcomeOK
	case errors.Is(err, fence.ErrOutcomeUnknown):
		return outcomeUnknown
	case errors.Is(err, fence.ErrNotApplied):
		return outcomeNotApplied
	case errors.Is(err, fence.ErrStale):
		if se, ok := fence.IsStale(err); ok && se.Overtaken {
			return outcomeOvertaken
		}
		return outcomeStale
	case errors.Is(err, fence.ErrTokenReused):
		return outcomeReused
	case errors.Is(err, fence.ErrBusy):
		return outcomeBusy
	}
	return outcomeUnexpected
}

// linearWrite is one recorded write of checkLinearizable. Invoked and
// Completed are ticks of the run's logical clock around the call; for a
// delayed write, Delivered is the tick after its held copy's delivery
// returned (0 for other writes).
type linearWrite struct {
	Writer    int
	Seq       int // its place in the writer's plan: orders a run's writes
	Resource  string
	Claim     fence.Claim
	Value     string
	Fault     faultKind
	Invoked   int64
	Completed int64
	Delivered int64
	// Applied is set for a held write whose subject reported its
	// committing request applied.
	Applied bool
	Err     error
	// Violation, when set, is what the subject did wrong around this
	// write besides its history (a hold that never caught the reply, a
	// delivery that failed).
	Violation string
}

// linearHistory is what checkLinearizable records: every write, every read
// (concurrent, read-backs and the final ones after every write and delivery
// completed).
type linearHistory struct {
	Writes []linearWrite
	Reads  []observation
}

func (h linearHistory) count(outcome string) int {
	n := 0
	for _, w := range h.Writes {
		if writeOutcome(w.Err) == outcome {
			n++
		}
	}
	return n
}

func (h linearHistory) summary() string {
	faults := map[faultKind]int{}
	for _, w := range h.Writes {
		if w.Fault != faultNone {
			faults[w.Fault]++
		}
	}
	var parts []string
	for _, o := range []string{outcomeOK, outcomeStale, outcomeOvertaken, outcomeReused, outcomeBusy, outcomeNotApplied, outcomeUnknown, outcomeUnexpected} {
		if n := h.count(o); n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, o))
		}
	}
	return fmt.Sprintf("%d writes (%d held, %d delayed): %s; %d reads",
		len(h.Writes), faults[faultHeld], faults[faultDelayed], strings.Join(parts, ", "), len(h.Reads))
}

// linInput and linOutput are the Porcupine operations' input and output.
type linInput struct {
	read  bool
	w     *linearWrite // for a write
	claim fence.Claim
	seq   int
	value string
}

type linOutput struct {
	outcome string
	state   resState // for a read
}

// regState is the fenced register's state: the stored value and token,
// the mark's run, and the highest plan position of that run's writes
// applied at this mark.
type regState struct {
	resState
	run string
	seq int
}

// admit applies a write to st when the register admits it.
func admit(st regState, in linInput) (regState, bool) {
	c := in.claim
	if fence.DecideClaim("", c, st.Token, st.run) != nil {
		return st, false
	}
	if c.Run != "" && c.Run == st.run && c.Token == st.Token && in.seq < st.seq {
		return st, false // a copy of an earlier write of this run
	}
	tok, run := fence.NextMark(c, st.Token, st.run)
	n := regState{resState: found(in.value, tok), run: run}
	switch {
	case c.Run != "":
		n.seq = in.seq
	case tok == st.Token && run == st.run:
		n.seq = st.seq
	}
	return n, true
}

func linStep(state, input, output any) []any {
	st, in, out := state.(regState), input.(linInput), output.(linOutput)
	if in.read {
		if out.state == st.resState {
			return []any{st}
		}
		return nil
	}
	switch out.outcome {
	case outcomeOK:
		if n, ok := admit(st, in); ok {
			return []any{n}
		}
		return nil
	case outcomeStale:
		if in.claim.Token < st.Token {
			return []any{st}
		}
		return nil
	case outcomeReused:
		if errors.Is(fence.DecideClaim("", in.claim, st.Token, st.run), fence.ErrTokenReused) {
			return []any{st}
		}
		return nil
	case outcomeBusy, outcomeNotApplied:
		return []any{st}
	default: // overtaken, unknown, unexpected: applied or not
		if n, ok := admit(st, in); ok {
			return []any{st, n}
		}
		return []any{st}
	}
}

var linModel = (&porcupine.NondeterministicModel{
	Init: func() []any { return []any{regState{}} },
	Step: linStep,
	Hash: func(state any) uint64 {
		st := state.(regState)
		h := fnv.New64a()
		fmt.Fprintf(h, "%t|%d|%q|%q|%d", st.Found, st.Token, st.Value, st.run, st.seq)
		return h.Sum64()
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(linInput), output.(linOutput)
		if in.read {
			return "read -> " + out.state.String()
		}
		return fmt.Sprintf("%s write %q (token %d, run %q) -> %s", in.w.Fault.label(), in.value, in.claim.Token, in.claim.Run, out.outcome)
	},
	DescribeState: func(state any) string {
		st := state.(regState)
		return fmt.Sprintf("%s mark run %q", st.resState, st.run)
	},
}).ToModel()

// checkLinearizableHistory checks h (see checkLinearizable) one resource at
// a time against the fenced register, with Porcupine, each search bounded
// by timeout (0: none). It reports every resource whose history is not
// linearizable (with its operations and the longest order the search could
// justify), every write whose subject reported a violation, every failed
// read, and a search that did not finish in time.
func checkLinearizableHistory(h linearHistory, timeout time.Duration) error {
	var errs []error
	byRes := map[string][]porcupine.Operation{}
	var last int64
	for _, w := range h.Writes {
		last = max(last, w.Completed, w.Delivered)
	}
	for _, o := range h.Reads {
		last = max(last, o.Completed)
	}
	for i := range h.Writes {
		w := &h.Writes[i]
		if w.Violation != "" {
			errs = append(errs, fmt.Errorf("%s write %q to %q (token %d, run %q): %s", w.Fault.label(), w.Value, w.Resource, w.Claim.Token, w.Claim.Run, w.Violation))
		}
		out := writeOutcome(w.Err)
		if out == outcomeUnexpected {
			errs = append(errs, fmt.Errorf("%s write %q to %q (token %d, run %q): unexpected error (not stale, reused, busy, not applied or outcome unknown): %w",
				w.Fault.label(), w.Value, w.Resource, w.Claim.Token, w.Claim.Run, w.Err))
		}
		switch out {
		case outcomeBusy, outcomeNotApplied:
			continue // never took effect, at any point: the register allows that always
		case outcomeStale, outcomeReused:
			// Took no effect; the refusal must have seen a mark that a
			// write invoked before it completed may have set. Checked
			// here rather than in the search: refusals spanning many
			// reads multiply the orders it must try.
			if err := justifyRefusal(h.Writes, w, out); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		ret := w.Completed
		if out == outcomeUnknown || out == outcomeUnexpected {
			switch {
			case w.Fault == faultHeld && w.Applied:
				// The store applied the request before WriteHeld returned.
			case w.Fault == faultDelayed:
				ret = max(ret, w.Delivered) // the held copy is answered by then
			default:
				ret = math.MaxInt64 // pending: may take effect at any later time
			}
		}
		byRes[w.Resource] = append(byRes[w.Resource], porcupine.Operation{
			ClientId: w.Writer,
			Input:    linInput{w: w, claim: w.Claim, seq: w.Seq, value: w.Value},
			Call:     w.Invoked, Output: linOutput{outcome: out}, Return: ret,
		})
	}
	for _, o := range h.Reads {
		if o.Err != nil {
			errs = append(errs, fmt.Errorf("%q: Read failed: %w", o.Resource, o.Err))
			continue
		}
		st := o.State
		if !st.Found {
			st = resState{}
		}
		byRes[o.Resource] = append(byRes[o.Resource], porcupine.Operation{
			ClientId: o.Reader, Input: linInput{read: true},
			Call: o.Invoked, Output: linOutput{state: st}, Return: o.Completed,
		})
	}
	resources := make([]string, 0, len(byRes))
	for r := range byRes {
		resources = append(resources, r)
	}
	sort.Strings(resources)
	for _, r := range resources {
		ops := byRes[r]
		res, info := porcupine.CheckOperationsVerbose(linModel, ops, timeout)
		switch res {
		case porcupine.Illegal:
			errs = append(errs, fmt.Errorf("%q: history not linearizable against the fenced register:\n%s", r, describeIllegal(ops, info)))
		case porcupine.Unknown:
			errs = append(errs, fmt.Errorf("%q: the linearizability search of %d operations did not finish in %v (raise Config.SearchTimeout or lower Config.FaultRounds)", r, len(ops), timeout))
		}
	}
	return errors.Join(errs...)
}

// mayHaveApplied reports whether a write's outcome leaves it possibly
// applied.
func mayHaveApplied(w *linearWrite) bool {
	switch writeOutcome(w.Err) {
	case outcomeOK, outcomeUnknown, outcomeOvertaken, outcomeUnexpected:
		return true
	}
	return false
}

// justifyRefusal checks a stale or reused refusal against the writes that
// may have set the mark it saw: for a stale one, a write with a higher token
// that may have been applied, invoked before the refusal completed; for a
// reused one, such a write with the same token and another run.
func justifyRefusal(ws []linearWrite, w *linearWrite, out string) error {
	for i := range ws {
		o := &ws[i]
		if o.Resource != w.Resource || o.Invoked >= w.Completed || !mayHaveApplied(o) {
			continue
		}
		if out == outcomeStale && o.Claim.Token > w.Claim.Token {
			return nil
		}
		if out == outcomeReused && o.Claim.Token == w.Claim.Token && o.Claim.Run != "" && o.Claim.Run != w.Claim.Run {
			return nil
		}
	}
	what := "a higher token"
	if out == outcomeReused {
		what = "its token and another run"
	}
	return fmt.Errorf("%s write %q to %q (token %d, run %q) refused as %s, but no write with %s that may have been applied was invoked before the refusal completed",
		w.Fault.label(), w.Value, w.Resource, w.Claim.Token, w.Claim.Run, out, what)
}

// maxDescribed bounds the operations a violation report lists.
const maxDescribed = 40

// describeIllegal lists the longest linearization Porcupine found and the
// operations it could not place after it, nearest first.
func describeIllegal(ops []porcupine.Operation, info porcupine.LinearizationInfo) string {
	var b strings.Builder
	var best []porcupine.Operation
	for _, part := range info.PartialLinearizationsOperations() {
		for _, l := range part {
			if len(l) > len(best) {
				best = l
			}
		}
	}
	placed := map[int64]bool{}
	states := []any{regState{}}
	fmt.Fprintf(&b, "  %d operations; the longest linearizable order places %d:\n", len(ops), len(best))
	from := max(0, len(best)-maxDescribed/2)
	if from > 0 {
		fmt.Fprintf(&b, "    ... %d earlier operations\n", from)
	}
	for i, op := range best {
		placed[op.Call] = true
		var next []any
		for _, st := range states {
			next = append(next, linStep(st, op.Input, op.Output)...)
		}
		states = next
		if i >= from {
			fmt.Fprintf(&b, "    %s  [%d..%s]  then %s\n", linModel.DescribeOperation(op.Input, op.Output), op.Call, tick(op.Return), describeStates(states))
		}
	}
	var rest []porcupine.Operation
	for _, op := range ops {
		if !placed[op.Call] {
			rest = append(rest, op)
		}
	}
	sort.Slice(rest, func(i, j int) bool { return rest[i].Call < rest[j].Call })
	fmt.Fprintf(&b, "  cannot be placed next (%d left), by invocation:\n", len(rest))
	for i, op := range rest {
		if i == maxDescribed/2 {
			fmt.Fprintf(&b, "    ... %d more\n", len(rest)-i)
			break
		}
		fmt.Fprintf(&b, "    %s  [%d..%s]\n", linModel.DescribeOperation(op.Input, op.Output), op.Call, tick(op.Return))
	}
	return strings.TrimRight(b.String(), "\n")
}

// describeStates lists the register states a partial order may be in.
func describeStates(states []any) string {
	seen := map[regState]bool{}
	var parts []string
	for _, st := range states {
		rs := st.(regState)
		if !seen[rs] {
			seen[rs] = true
			parts = append(parts, rs.String())
		}
	}
	return strings.Join(parts, " or ")
}

func tick(t int64) string {
	if t == math.MaxInt64 {
		return "pending"
	}
	return fmt.Sprint(t)
}
