package guardtest

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencekit/fencekit/fence"
)

// CheckLinearizable runs cfg.Writers concurrent writers and cfg.Readers
// concurrent readers over cfg.Resources resources for cfg.FaultRounds rounds
// of interleaved, shuffled tokens (see Workload), with run identities: each
// token's holder writes under its own run, sometimes twice in a row, now and
// then without a run, and now and then the same token is presented by
// another run (a re-issued token). Writers also read back now and then, and
// start each round together, so tokens race within a round.
//
// One write in cfg.FaultEvery (at most one at a time per resource) is
// faulted, as the Subject allows: through OutcomeWriter.WriteHeld (its
// committing request's reply held; the check ends the write's context once
// the subject reports it applied) or through DuplicateWriter.WriteDelayed
// (its first request copy held in transit; delivered after a random number
// of other writes, or after cfg.DeliveryDelay, while the writers go on, and
// always followed by a later write of the same run to the same resource;
// the resource is read as soon as the delivery returns).
// Held writes carry no run identity (WriteHeld takes a token; see
// OutcomeWriter), so every subject's held write presents the same claim.
//
// The recorded history (invocation and completion of every write, read and
// delivery, and the outcome of each) must be linearizable, checked with
// Porcupine (github.com/anishathalye/porcupine) one resource at a time,
// against a fenced register: a write of claim (T, run) is applied if and
// only if fence.DecideClaim admits it over the mark (T above the mark, or
// equal with compatible runs), the mark then becomes fence.NextMark's, and
// a read returns the value and token of the last applied write. A copy of an
// earlier write of a run is never applied after a later write of that run
// at the same mark (the register refuses it). Outcomes:
//
//   - nil: applied, between invocation and completion;
//   - stale (Overtaken false): not applied, refused at a moment the mark was
//     above its token; reused: not applied, the mark was its token with
//     another run; busy and settled-not-applied (fence.ErrNotApplied): not
//     applied, ever (the held copy included);
//   - stale with Overtaken, outcome unknown (fence.ErrOutcomeUnknown): may
//     have been applied (when admitted), or not. Until when: a held write's
//     effect is over when WriteHeld returns (the subject reported the store
//     applied its request), a delayed write's when its held copy's delivery
//     returns, a stale-overtaken write's when it returns (the guard saw the
//     higher mark); an unfaulted write whose outcome is unknown stays
//     pending for ever;
//   - anything else is reported as an unexpected error (and modelled as an
//     unknown outcome so that the search still runs).
//
// The Subject needs neither OutcomeWriter nor DuplicateWriter: without them
// the faults are skipped, and logged (cfg.Logf), and the fault-free history
// is still checked. Without a ClaimWriter, plain writes go through Write
// and carry no run identity.
func CheckLinearizable(ctx context.Context, s Subject, cfg Config) error {
	ow, _ := s.(OutcomeWriter)
	dw, _ := s.(DuplicateWriter)
	cw, _ := s.(ClaimWriter)
	var faults []Fault
	var skipped []string
	if ow != nil {
		faults = append(faults, FaultHeld)
	} else {
		skipped = append(skipped, "held replies (no guardtest.OutcomeWriter)")
	}
	if dw != nil {
		faults = append(faults, FaultDelayed)
	} else {
		skipped = append(skipped, "delayed duplicates (no guardtest.DuplicateWriter)")
	}
	if cw == nil {
		skipped = append(skipped, "run identities on plain writes (no guardtest.ClaimWriter)")
	}
	if len(skipped) > 0 && cfg.Logf != nil {
		cfg.Logf("guardtest: linearizability check without %s", strings.Join(skipped, ", "))
	}
	resources := make([]string, cfg.Resources)
	for i := range resources {
		resources[i] = resourceName(cfg, "linearizable", i)
	}
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	plan := LinearizablePlan(rng, resources, cfg.Writers, cfg.FaultRounds, cfg.FaultEvery, faults, cw != nil)
	r := &linRunner{s: s, ow: ow, dw: dw, cw: cw, cfg: cfg, plan: plan, resources: resources,
		slots: map[string]*atomic.Bool{}, rng: rng}
	for _, res := range resources {
		r.slots[res] = new(atomic.Bool)
	}
	h, err := r.run(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	res := CheckLinearizableHistory(h, cfg.SearchTimeout)
	if cfg.Logf != nil {
		cfg.Logf("guardtest: linearizability: %s; search %v", h.summary(), time.Since(start).Round(time.Millisecond))
	}
	if res != nil {
		return res
	}
	if h.count(outcomeOK) == 0 {
		return fmt.Errorf("no write of %d was accepted", len(h.Writes))
	}
	return nil
}

// Fault is how CheckLinearizable makes a planned write.
type Fault string

// Faults of CheckLinearizable.
const (
	FaultNone    Fault = ""        // Write, or WriteClaim with a ClaimWriter
	FaultHeld    Fault = "held"    // OutcomeWriter.WriteHeld
	FaultDelayed Fault = "delayed" // DuplicateWriter.WriteDelayed
)

func (f Fault) label() string {
	if f == FaultNone {
		return "plain"
	}
	return string(f)
}

// PlannedWrite is one write of a LinearizablePlan.
type PlannedWrite struct {
	Resource string
	Claim    fence.Claim
	Value    string
	Fault    Fault
	ReadBack bool // the writer reads Resource right after this write
	Round    int  // the round of its token: writers start each round together
}

// LinearizablePlan returns, for each writer, the writes CheckLinearizable
// makes in order. Tokens are Workload's (rounds rounds over resources). Each
// token's writer presents the run "g<token>.w<writer>", or (when claims is
// false, or for one write in ten) no run; one write in four is followed by a
// second write of the same claim; one in twelve is echoed by the next writer
// with the same token and a run of its own (a re-issued token). With faults
// given, one write in faultEvery (and at least one) is made through one of
// them, chosen at random: a held write presents its token without a run, a
// delayed write is always followed by a second write of the same claim.
// Values are unique.
func LinearizablePlan(rng *rand.Rand, resources []string, writers, rounds, faultEvery int, faults []Fault, claims bool) [][]PlannedWrite {
	base := Workload(rng, resources, writers, rounds)
	plan := make([][]PlannedWrite, writers)
	val := func(w int, tok fence.Token) string { return fmt.Sprintf("w%d.%d-t%d", w, len(plan[w]), tok) }
	round := 0
	add := func(w int, p PlannedWrite) {
		p.Round = round
		p.Value = val(w, p.Claim.Token)
		p.ReadBack = rng.IntN(4) == 0
		plan[w] = append(plan[w], p)
	}
	nFaults := 0
	per := len(resources)
	for j := 0; j < rounds; j++ {
		round = j
		for w := 0; w < writers; w++ {
			for _, a := range base[w][j*per : (j+1)*per] {
				c := fence.Claim{Token: a.Token}
				if claims && rng.IntN(10) != 0 {
					c.Run = fmt.Sprintf("g%d.w%d", a.Token, w)
				}
				p := PlannedWrite{Resource: a.Resource, Claim: c}
				if len(faults) > 0 && rng.IntN(max(faultEvery, 1)) == 0 {
					p.Fault = faults[rng.IntN(len(faults))]
				}
				if p.Fault == FaultHeld {
					p.Claim.Run = ""
				}
				if p.Fault != FaultNone {
					nFaults++
				}
				add(w, p)
				if p.Fault == FaultDelayed || rng.IntN(4) == 0 {
					add(w, PlannedWrite{Resource: a.Resource, Claim: p.Claim})
				}
				if claims && writers > 1 && rng.IntN(12) == 0 {
					o := (w + 1) % writers
					add(o, PlannedWrite{Resource: a.Resource, Claim: fence.Claim{Token: a.Token, Run: fmt.Sprintf("g%d.x%d", a.Token, o)}})
				}
			}
		}
	}
	if len(faults) > 0 && nFaults == 0 && len(plan[0]) > 0 {
		f := faults[rng.IntN(len(faults))]
		plan[0][0].Fault = f
		if f == FaultHeld {
			plan[0][0].Claim.Run = ""
		} else {
			// A delayed write is followed by a later write of its claim.
			p := plan[0][0]
			p.Fault, p.Value = FaultNone, p.Value+"-again"
			plan[0] = append([]PlannedWrite{plan[0][0], p}, plan[0][1:]...)
		}
	}
	return plan
}

// Outcomes of a write in a LinearHistory.
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

// LinearWrite is one recorded write of CheckLinearizable. Invoked and
// Completed are ticks of the run's logical clock around the call; for a
// delayed write, Delivered is the tick after its held copy's delivery
// returned (0 for other writes).
type LinearWrite struct {
	Writer    int
	Seq       int // its place in the writer's plan: orders a run's writes
	Resource  string
	Claim     fence.Claim
	Value     string
	Fault     Fault
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

// LinearHistory is what CheckLinearizable records: every write, every read
// (concurrent, read-backs and the final ones after every write and delivery
// completed).
type LinearHistory struct {
	Writes []LinearWrite
	Reads  []Observation
}

func (h LinearHistory) count(outcome string) int {
	n := 0
	for _, w := range h.Writes {
		if writeOutcome(w.Err) == outcome {
			n++
		}
	}
	return n
}

func (h LinearHistory) summary() string {
	faults := map[Fault]int{}
	for _, w := range h.Writes {
		if w.Fault != FaultNone {
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
		len(h.Writes), faults[FaultHeld], faults[FaultDelayed], strings.Join(parts, ", "), len(h.Reads))
}

// linInput and linOutput are the Porcupine operations' input and output.
type linInput struct {
	read  bool
	w     *LinearWrite // for a write
	claim fence.Claim
	seq   int
	value string
}

type linOutput struct {
	outcome string
	state   State // for a read
}

// regState is the fenced register's state: the stored value and token,
// the mark's run, and the highest plan position of that run's writes
// applied at this mark.
type regState struct {
	State
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
	n := regState{State: found(in.value, tok), run: run}
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
		if out.state == st.State {
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
		return fmt.Sprintf("%s mark run %q", st.State, st.run)
	},
}).ToModel()

// CheckLinearizableHistory checks h (see CheckLinearizable) one resource at
// a time against the fenced register, with Porcupine, each search bounded
// by timeout (0: none). It reports every resource whose history is not
// linearizable (with its operations and the longest order the search could
// justify), every write whose subject reported a violation, every failed
// read, and a search that did not finish in time.
func CheckLinearizableHistory(h LinearHistory, timeout time.Duration) error {
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
			case w.Fault == FaultHeld && w.Applied:
				// The store applied the request before WriteHeld returned.
			case w.Fault == FaultDelayed:
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
			st = State{}
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
func mayHaveApplied(w *LinearWrite) bool {
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
func justifyRefusal(ws []LinearWrite, w *LinearWrite, out string) error {
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

// linRunner executes a plan.
type linRunner struct {
	s         Subject
	ow        OutcomeWriter
	dw        DuplicateWriter
	cw        ClaimWriter
	cfg       Config
	plan      [][]PlannedWrite
	resources []string
	slots     map[string]*atomic.Bool // a faulted write in flight (or its copy held) per resource
	rng       *rand.Rand              // used before the goroutines start only

	clock  atomic.Int64
	post   postman
	rounds barrier

	mu            sync.Mutex
	deliveryReads []Observation // a read right after each delivery
}

func (r *linRunner) run(ctx context.Context) (LinearHistory, error) {
	start := make(chan struct{})
	writersDone := make(chan struct{})
	total := 0
	for _, p := range r.plan {
		total += len(p)
	}
	out := make([][]*LinearWrite, len(r.plan))
	reads := make([][]Observation, len(r.plan)+max(r.cfg.Readers, 0))
	seeds := make([]uint64, len(r.plan))
	for i := range seeds {
		seeds[i] = r.rng.Uint64()
	}
	r.rounds.init(len(r.plan), r.cfg.FaultRounds)
	var writers, readers sync.WaitGroup
	for w := range r.plan {
		writers.Add(1)
		go func() {
			defer writers.Done()
			rng := rand.New(rand.NewPCG(seeds[w], uint64(w)))
			<-start
			next := 0 // the next round this writer arrives at
			defer func() { r.rounds.leave(next) }()
			for i, p := range r.plan[w] {
				for ; next <= p.Round; next++ {
					r.rounds.arrive(ctx, next)
				}
				if ctx.Err() != nil {
					return
				}
				lw := &LinearWrite{Writer: w, Seq: i, Resource: p.Resource, Claim: p.Claim, Value: p.Value}
				r.write(ctx, rng, p, lw)
				out[w] = append(out[w], lw)
				r.post.tick()
				if p.ReadBack {
					reads[w] = append(reads[w], r.read(ctx, w, p.Resource))
				}
			}
		}()
	}
	for rd := 0; rd < r.cfg.Readers; rd++ {
		readers.Add(1)
		go func() {
			defer readers.Done()
			<-start
			for i := 0; i < total; i++ {
				select {
				case <-writersDone:
					return
				default:
				}
				if ctx.Err() != nil {
					return
				}
				reads[len(r.plan)+rd] = append(reads[len(r.plan)+rd], r.read(ctx, len(r.plan)+rd, r.resources[(i+rd)%len(r.resources)]))
			}
		}()
	}
	close(start)
	writers.Wait()
	close(writersDone)
	r.post.flush()
	readers.Wait()
	r.post.wg.Wait()
	if err := ctx.Err(); err != nil {
		return LinearHistory{}, fmt.Errorf("linearizability run did not finish: %w", err)
	}
	var h LinearHistory
	for _, ws := range out {
		for _, w := range ws {
			h.Writes = append(h.Writes, *w)
		}
	}
	for _, os := range reads {
		h.Reads = append(h.Reads, os...)
	}
	h.Reads = append(h.Reads, r.deliveryReads...)
	final := len(reads)
	for _, res := range r.resources {
		h.Reads = append(h.Reads, r.read(ctx, final, res))
	}
	return h, nil
}

func (r *linRunner) read(ctx context.Context, client int, res string) Observation {
	o := Observation{Reader: client, Resource: res}
	o.Invoked = r.clock.Add(1)
	v, tok, ok, err := r.s.Read(ctx, res)
	o.Completed = r.clock.Add(1)
	o.Err = err
	if ok && err == nil {
		o.State = found(v, tok)
	}
	return o
}

// errHeldCause ends a held write's context once its subject reports the
// commit applied.
var errHeldCause = errors.New("guardtest: the check ends a held write's context after its commit was applied")

func (r *linRunner) write(ctx context.Context, rng *rand.Rand, p PlannedWrite, lw *LinearWrite) {
	slot := r.slots[p.Resource]
	fault := p.Fault
	// One faulted write in flight per resource: subjects hold one request
	// per resource at a time. A write that finds the slot taken goes plain.
	if fault != FaultNone && !slot.CompareAndSwap(false, true) {
		fault = FaultNone
	}
	lw.Fault = fault
	switch fault {
	case FaultHeld:
		defer slot.Store(false)
		hctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		tctx, tcancel := context.WithTimeout(hctx, DelayedWriteTimeout)
		defer tcancel()
		var applied atomic.Bool
		lw.Invoked = r.clock.Add(1)
		lw.Err = r.ow.WriteHeld(fence.WithClaim(tctx, p.Claim), p.Resource, p.Claim.Token, p.Value, func() {
			applied.Store(true)
			cancel(errHeldCause)
		})
		lw.Completed = r.clock.Add(1)
		lw.Applied = applied.Load()
		if !lw.Applied && writeOutcome(lw.Err) == outcomeOK {
			lw.Violation = "WriteHeld returned nil without reporting its commit applied: the subject's hold never caught the committing request's reply"
		}
	case FaultDelayed:
		dctx, cancel := context.WithTimeout(ctx, DelayedWriteTimeout)
		lw.Invoked = r.clock.Add(1)
		deliver, err := r.dw.WriteDelayed(dctx, p.Resource, p.Claim, p.Value)
		lw.Completed = r.clock.Add(1)
		cancel()
		lw.Err = err
		if deliver == nil {
			slot.Store(false)
			lw.Violation = fmt.Sprintf("WriteDelayed returned no deliver function (error %s)", errText(err))
			lw.Delivered = lw.Completed
			return
		}
		// Delivered after a random number of other writes, or after
		// DeliveryDelay when the writers stall (a store that serialises
		// writes behind the held copy).
		r.post.send(ctx, 1+rng.IntN(len(r.plan)), r.cfg.DeliveryDelay, func(ctx context.Context) {
			defer slot.Store(false)
			if err := deliver(ctx); err != nil {
				switch writeOutcome(lw.Err) {
				case outcomeStale, outcomeReused, outcomeBusy:
					if errors.Is(err, ErrNothingHeld) {
						break // refused before any committing request left
					}
					fallthrough
				default:
					lw.Violation = fmt.Sprintf("delivering the held copy: %v", err)
				}
			}
			lw.Delivered = r.clock.Add(1)
			// Read at once: a copy applied on delivery shows before the
			// next write to the resource hides it.
			o := r.read(ctx, lw.Writer, p.Resource)
			r.mu.Lock()
			r.deliveryReads = append(r.deliveryReads, o)
			r.mu.Unlock()
		})
	default:
		lw.Invoked = r.clock.Add(1)
		if r.cw != nil {
			lw.Err = r.cw.WriteClaim(ctx, p.Resource, p.Claim, p.Value)
		} else {
			lw.Err = r.s.Write(ctx, p.Resource, p.Claim.Token, p.Value)
		}
		lw.Completed = r.clock.Add(1)
	}
}

// postman delivers held copies once a number of further writes completed,
// or after a delay, whichever comes first.
type postman struct {
	mu      sync.Mutex
	done    int
	waiting []parcel
	wg      sync.WaitGroup
}

type parcel struct {
	due   int
	ready chan struct{}
}

// send schedules deliver after n more completed writes or after delay.
func (p *postman) send(ctx context.Context, n int, delay time.Duration, deliver func(context.Context)) {
	ready := make(chan struct{})
	p.mu.Lock()
	p.waiting = append(p.waiting, parcel{due: p.done + n, ready: ready})
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-ready:
		case <-t.C:
		case <-ctx.Done():
		}
		deliver(ctx)
	}()
	p.release()
}

// tick counts a completed write and releases the parcels due.
func (p *postman) tick() {
	p.mu.Lock()
	p.done++
	p.mu.Unlock()
	p.release()
}

func (p *postman) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	kept := p.waiting[:0]
	for _, pc := range p.waiting {
		if pc.due <= p.done {
			close(pc.ready)
		} else {
			kept = append(kept, pc)
		}
	}
	p.waiting = kept
}

// flush releases every parcel: the writers are done.
func (p *postman) flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pc := range p.waiting {
		close(pc.ready)
	}
	p.waiting = nil
}

// barrier starts each round's writes together, so that a slow writer
// drifts at most a round behind: tokens race within a round instead of one
// writer's finishing before another starts (in-process subjects).
type barrier struct {
	mu      sync.Mutex
	n       int
	arrived []int
	open    []chan struct{}
}

func (b *barrier) init(n, rounds int) {
	b.n = n
	b.arrived = make([]int, rounds)
	b.open = make([]chan struct{}, rounds)
	for i := range b.open {
		b.open[i] = make(chan struct{})
	}
}

// arrive waits until every writer has reached round j, or ctx ends.
func (b *barrier) arrive(ctx context.Context, j int) {
	if j >= len(b.open) {
		return
	}
	b.count(j)
	select {
	case <-b.open[j]:
	case <-ctx.Done():
	}
}

// leave counts a finished writer as arrived at every round from j on.
func (b *barrier) leave(j int) {
	for ; j < len(b.open); j++ {
		b.count(j)
	}
}

func (b *barrier) count(j int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.arrived[j]++
	if b.arrived[j] == b.n {
		close(b.open[j])
	}
}
