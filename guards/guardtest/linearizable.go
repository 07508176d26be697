package guardtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// checkLinearizable runs cfg.Writers concurrent writers and cfg.Readers
// concurrent readers over cfg.Resources resources for cfg.FaultRounds rounds
// of interleaved, shuffled tokens (see workload), with run identities: each
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
func checkLinearizable(ctx context.Context, s Subject, cfg Config) error {
	ow, _ := s.(OutcomeWriter)
	dw, _ := s.(DuplicateWriter)
	cw, _ := s.(ClaimWriter)
	var faults []faultKind
	var skipped []string
	if ow != nil {
		faults = append(faults, faultHeld)
	} else {
		skipped = append(skipped, "held replies (no guardtest.OutcomeWriter)")
	}
	if dw != nil {
		faults = append(faults, faultDelayed)
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
	plan := linearizablePlan(rng, resources, cfg.Writers, cfg.FaultRounds, cfg.FaultEvery, faults, cw != nil)
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
	res := checkLinearizableHistory(h, cfg.SearchTimeout)
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

// faultKind is how checkLinearizable makes a planned write.
type faultKind string

// Faults of checkLinearizable.
const (
	faultNone    faultKind = ""        // Write, or WriteClaim with a ClaimWriter
	faultHeld    faultKind = "held"    // OutcomeWriter.WriteHeld
	faultDelayed faultKind = "delayed" // DuplicateWriter.WriteDelayed
)

func (f faultKind) label() string {
	if f == faultNone {
		return "plain"
	}
	return string(f)
}

// plannedWrite is one write of a linearizablePlan.
type plannedWrite struct {
	Resource string
	Claim    fence.Claim
	Value    string
	Fault    faultKind
	ReadBack bool // the writer reads Resource right after this write
	Round    int  // the round of its token: writers start each round together
}

// linearizablePlan returns, for each writer, the writes checkLinearizable
// makes in order. Tokens are workload's (rounds rounds over resources). Each
// token's writer presents the run "g<token>.w<writer>", or (when claims is
// false, or for one write in ten) no run; one write in four is followed by a
// second write of the same claim; one in twelve is echoed by the next writer
// with the same token and a run of its own (a re-issued token). With faults
// given, one write in faultEvery (and at least one) is made through one of
// them, chosen at random: a held write presents its token without a run, a
// delayed write is always followed by a second write of the same claim.
// Values are unique.
func linearizablePlan(rng *rand.Rand, resources []string, writers, rounds, faultEvery int, faults []faultKind, claims bool) [][]plannedWrite {
	base := workload(rng, resources, writers, rounds)
	plan := make([][]plannedWrite, writers)
	val := func(w int, tok fence.Token) string { return fmt.Sprintf("w%d.%d-t%d", w, len(plan[w]), tok) }
	round := 0
	add := func(w int, p plannedWrite) {
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
				p := plannedWrite{Resource: a.Resource, Claim: c}
				if len(faults) > 0 && rng.IntN(max(faultEvery, 1)) == 0 {
					p.Fault = faults[rng.IntN(len(faults))]
				}
				if p.Fault == faultHeld {
					p.Claim.Run = ""
				}
				if p.Fault != faultNone {
					nFaults++
				}
				add(w, p)
				if p.Fault == faultDelayed || rng.IntN(4) == 0 {
					add(w, plannedWrite{Resource: a.Resource, Claim: p.Claim})
				}
				if claims && writers > 1 && rng.IntN(12) == 0 {
					o := (w + 1) % writers
					add(o, plannedWrite{Resource: a.Resource, Claim: fence.Claim{Token: a.Token, Run: fmt.Sprintf("g%d.x%d", a.Token, o)}})
				}
			}
		}
	}
	if len(faults) > 0 && nFaults == 0 && len(plan[0]) > 0 {
		f := faults[rng.IntN(len(faults))]
		plan[0][0].Fault = f
		if f == faultHeld {
			plan[0][0].Claim.Run = ""
		} else {
			// A delayed write is followed by a later write of its claim.
			p := plan[0][0]
			p.Fault, p.Value = faultNone, p.Value+"-again"
			plan[0] = append([]plannedWrite{plan[0][0], p}, plan[0][1:]...)
		}
	}
	return plan
}
