package history

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// ViolationKind names a class of safety violation.
type ViolationKind string

// The violations Check reports (see the package documentation).
const (
	OverlappingOwnership ViolationKind = "overlapping-ownership"
	StaleAccepted        ViolationKind = "stale-accepted"
	FinalState           ViolationKind = "final-state"
	TokenOrder           ViolationKind = "token-order"
	WorkAfterLoss        ViolationKind = "work-after-loss"
)

// AllViolationKinds lists every ViolationKind in report order.
var AllViolationKinds = []ViolationKind{OverlappingOwnership, StaleAccepted, FinalState, TokenOrder, WorkAfterLoss}

// Violation is one safety violation with the events that show it.
type Violation struct {
	Kind    ViolationKind
	Subject string // the lease key or resource concerned
	Message string
	Events  []Event
}

// String formats v on several lines: a headline and one line per event.
func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "VIOLATION %s on %s: %s", v.Kind, v.Subject, v.Message)
	for _, e := range v.Events {
		b.WriteString("\n    ")
		b.WriteString(e.String())
	}
	return b.String()
}

// Options tunes Check.
type Options struct {
	// WorkSlack is how long past its trust deadline a work step may still
	// be recorded before it counts as work after loss. Timers fire late on
	// a loaded machine, so a lease context may end slightly after the
	// deadline; the lease's safety margin must exceed this slack. Zero
	// means no slack.
	WorkSlack time.Duration
	// MaxPerKind bounds how many violations of one kind are kept in
	// Report.Violations (all are counted). Default 10.
	MaxPerKind int
}

// Stats summarises a history.
type Stats struct {
	Events int
	// Executions counts the distinct Exec ids that tried to acquire.
	Executions    int
	Grants        int
	Refusals      int
	AcquireErrors int
	RenewOK       int
	RenewRejected int
	RenewErrors   int
	Releases      int
	WorkSteps     int
	LossByCause   map[string]int
	FaultsByKind  map[string]int
	// Writes counts completed writes per guard and outcome; writes that
	// never completed (a killed process) count as Unknown.
	Writes    map[string]map[Outcome]int
	Resources int
}

// Report is the result of Check.
type Report struct {
	Violations []Violation           // at most Options.MaxPerKind per kind
	Counts     map[ViolationKind]int // every violation, per kind
	Stats      Stats
}

// OK reports whether no violation was found.
func (r *Report) OK() bool { return r.Total() == 0 }

// Total is the number of violations found.
func (r *Report) Total() int {
	n := 0
	for _, c := range r.Counts {
		n += c
	}
	return n
}

// String lists the violations, or says the history is clean.
func (r *Report) String() string {
	if r.OK() {
		return fmt.Sprintf("history clean: %d events, %d grants, 0 violations", r.Stats.Events, r.Stats.Grants)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d violation(s):", r.Total())
	for _, k := range AllViolationKinds {
		if c := r.Counts[k]; c > 0 {
			fmt.Fprintf(&b, " %s=%d", k, c)
		}
	}
	for _, v := range r.Violations {
		b.WriteString("\n")
		b.WriteString(v.String())
	}
	return b.String()
}

// tenure is one grant's life as its execution saw it.
type tenure struct {
	grant    Event
	start    int64 // grant reply arrived
	sent     int64 // grant request sent
	deadline int64 // trust deadline, extended by timely renewals
	ends     []Event
	end      int64 // min(deadline, loss, release)
	lossAt   int64 // 0: no loss observed
	relAt    int64 // 0: no release sent
	renewals []Event
	observed Event // the last work step that extended deadline, if any
}

// inForce returns the trust deadline in force at time at (grant and the
// renewals whose reply arrived by then).
func (t *tenure) inForce(at int64) int64 {
	d := t.grant.Deadline
	for _, r := range t.renewals {
		if r.Mono <= at && r.Deadline > d {
			d = r.Deadline
		}
	}
	return d
}

type attempt struct {
	invoke   Event
	complete *Event
}

func (a attempt) completedAt() int64 {
	if a.complete == nil {
		return math.MaxInt64
	}
	return a.complete.Mono
}

func (a attempt) outcome() Outcome {
	if a.complete == nil {
		return Unknown
	}
	return a.complete.Outcome
}

type checker struct {
	opts   Options
	report *Report
}

func (c *checker) add(v Violation) {
	v.Events = append([]Event(nil), v.Events...)
	byTime(v.Events)
	c.report.Counts[v.Kind]++
	if c.report.Counts[v.Kind] <= c.opts.MaxPerKind {
		c.report.Violations = append(c.report.Violations, v)
	}
}

// Check verifies a history. The events may come in any order and from many
// processes; Check orders them by Mono (then Seq).
func Check(events []Event, opts Options) *Report {
	if opts.MaxPerKind <= 0 {
		opts.MaxPerKind = 10
	}
	evs := append([]Event(nil), events...)
	byTime(evs)
	c := &checker{opts: opts, report: &Report{Counts: map[ViolationKind]int{}}}
	c.stats(evs)

	tenures, byRun := c.tenures(evs)
	c.ownership(tenures)
	c.tokenOrder(tenures)
	c.work(evs, byRun, tenures)
	attempts := c.attempts(evs)
	c.staleAccepted(attempts)
	c.finalState(evs, attempts)
	return c.report
}

func (c *checker) stats(evs []Event) {
	s := &c.report.Stats
	s.Events = len(evs)
	s.LossByCause = map[string]int{}
	s.FaultsByKind = map[string]int{}
	s.Writes = map[string]map[Outcome]int{}
	execs := map[string]bool{}
	resources := map[string]bool{}
	invoked := map[string]Event{}
	for _, e := range evs {
		switch e.Kind {
		case AcquireGranted, AcquireRefused, AcquireError:
			execs[e.Exec] = true
		}
		switch e.Kind {
		case AcquireGranted:
			s.Grants++
		case AcquireRefused:
			s.Refusals++
		case AcquireError:
			s.AcquireErrors++
		case RenewOK:
			s.RenewOK++
		case RenewRejected:
			s.RenewRejected++
		case RenewError:
			s.RenewErrors++
		case Release:
			s.Releases++
		case Work:
			s.WorkSteps++
		case Loss:
			s.LossByCause[e.Cause]++
		case Fault:
			s.FaultsByKind[e.Cause]++
		case WriteInvoke:
			invoked[opKey(e)] = e
			resources[e.Resource] = true
		case WriteComplete:
			delete(invoked, opKey(e))
			s.countWrite(e.Guard, e.Outcome)
		}
	}
	for _, e := range invoked {
		s.countWrite(e.Guard, Unknown)
	}
	s.Executions = len(execs)
	s.Resources = len(resources)
}

func (s *Stats) countWrite(guard string, o Outcome) {
	m := s.Writes[guard]
	if m == nil {
		m = map[Outcome]int{}
		s.Writes[guard] = m
	}
	m[o]++
}

func opKey(e Event) string { return fmt.Sprintf("%s/%d", e.Exec, e.Op) }

// tenures builds one tenure per grant, in grant order, and indexes them by
// run id.
func (c *checker) tenures(evs []Event) ([]*tenure, map[string]*tenure) {
	byRun := map[string]*tenure{}
	var out []*tenure
	for _, e := range evs {
		switch e.Kind {
		case AcquireGranted:
			sent := e.Sent
			if sent == 0 || sent > e.Mono {
				sent = e.Mono
			}
			t := &tenure{grant: e, start: e.Mono, sent: sent, deadline: e.Deadline}
			if prev, dup := byRun[e.RunID]; dup {
				c.add(Violation{Kind: TokenOrder, Subject: e.Key,
					Message: fmt.Sprintf("run id %s granted twice", e.RunID),
					Events:  []Event{prev.grant, e}})
			}
			byRun[e.RunID] = t
			out = append(out, t)
		case RenewOK:
			t := byRun[e.RunID]
			if t == nil {
				continue
			}
			t.renewals = append(t.renewals, e)
			// A renewal extends the belief only if its reply arrived while
			// the execution still trusted the lease.
			if e.Mono <= t.deadline && t.lossAt == 0 && t.relAt == 0 && e.Deadline > t.deadline {
				t.deadline = e.Deadline
			}
		case Work:
			// A work step also reports the deadline the execution believed
			// in at that moment; it may have been extended by a renewal the
			// execution did not record itself (a lease's own background
			// renewal).
			// (Above a millisecond: MonoOf's conversion jitters by
			// microseconds.)
			if t := byRun[e.RunID]; t != nil && e.Mono <= t.deadline && t.lossAt == 0 && t.relAt == 0 && e.Deadline > t.deadline+int64(time.Millisecond) {
				t.deadline = e.Deadline
				t.observed = e
			}
		case Loss:
			if t := byRun[e.RunID]; t != nil && t.lossAt == 0 {
				t.lossAt = e.Mono
				t.ends = append(t.ends, e)
			}
		case Release:
			if t := byRun[e.RunID]; t != nil && t.relAt == 0 {
				t.relAt = e.Mono
				t.ends = append(t.ends, e)
			}
		}
	}
	for _, t := range out {
		t.end = t.deadline
		if t.lossAt != 0 && t.lossAt < t.end {
			t.end = t.lossAt
		}
		if t.relAt != 0 && t.relAt < t.end {
			t.end = t.relAt
		}
	}
	return out, byRun
}

func (t *tenure) evidence() []Event {
	ev := []Event{t.grant}
	if n := len(t.renewals); n > 0 {
		ev = append(ev, t.renewals[n-1])
	}
	if t.observed.Kind != "" {
		ev = append(ev, t.observed)
	}
	return append(ev, t.ends...)
}

func groupByKey(ts []*tenure) (map[string][]*tenure, []string) {
	m := map[string][]*tenure{}
	for _, t := range ts {
		m[t.grant.Key] = append(m[t.grant.Key], t)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return m, keys
}

// ownership reports overlapping belief intervals of one key, and renewals
// accepted for a grant already superseded by a later grant.
func (c *checker) ownership(ts []*tenure) {
	m, keys := groupByKey(ts)
	for _, k := range keys {
		list := m[k] // in start order
		for i, a := range list {
			for _, b := range list[i+1:] {
				if b.start >= a.end {
					continue
				}
				if a.start < b.end && a.grant.RunID != b.grant.RunID {
					c.add(Violation{Kind: OverlappingOwnership, Subject: k,
						Message: fmt.Sprintf("%s (token %d) believed it owned the key until %s, but %s (token %d) was granted it at %s",
							a.grant.Exec, a.grant.Token, fmtMono(a.end), b.grant.Exec, b.grant.Token, fmtMono(b.start)),
						Events: append(a.evidence(), b.evidence()...)})
				}
			}
			for _, r := range a.renewals {
				rs := r.Sent
				if rs == 0 {
					rs = r.Mono
				}
				for _, b := range list {
					if b.grant.Token > a.grant.Token && b.start < rs {
						c.add(Violation{Kind: OverlappingOwnership, Subject: k,
							Message: fmt.Sprintf("renewal of %s (token %d) accepted after %s had been granted token %d",
								a.grant.Exec, a.grant.Token, b.grant.Exec, b.grant.Token),
							Events: []Event{a.grant, b.grant, r}})
						break
					}
				}
			}
		}
	}
}

// tokenOrder reports per-key grants whose token does not exceed that of a
// grant whose reply arrived before their request was sent.
func (c *checker) tokenOrder(ts []*tenure) {
	m, keys := groupByKey(ts)
	for _, k := range keys {
		list := m[k] // sorted by start
		// prefix maximum of tokens by start
		maxIdx := make([]int, len(list))
		for i := range list {
			maxIdx[i] = i
			if i > 0 && list[maxIdx[i-1]].grant.Token >= list[i].grant.Token {
				maxIdx[i] = maxIdx[i-1]
			}
		}
		seen := map[fence.Token]*tenure{}
		for _, b := range list {
			if a := seen[b.grant.Token]; a != nil {
				c.add(Violation{Kind: TokenOrder, Subject: k,
					Message: fmt.Sprintf("token %d granted twice (%s and %s)", b.grant.Token, a.grant.Exec, b.grant.Exec),
					Events:  []Event{a.grant, b.grant}})
				continue
			}
			seen[b.grant.Token] = b
			// grants that had completed before b was sent
			n := sort.Search(len(list), func(i int) bool { return list[i].start >= b.sent })
			if n == 0 {
				continue
			}
			if a := list[maxIdx[n-1]]; a.grant.Token >= b.grant.Token {
				c.add(Violation{Kind: TokenOrder, Subject: k,
					Message: fmt.Sprintf("grant to %s carried token %d, not above token %d granted to %s before its request was sent",
						b.grant.Exec, b.grant.Token, a.grant.Token, a.grant.Exec),
					Events: []Event{a.grant, b.grant}})
			}
		}
	}
}

// work reports work steps taken outside the execution's own tenure.
func (c *checker) work(evs []Event, byRun map[string]*tenure, ts []*tenure) {
	m, _ := groupByKey(ts)
	slack := int64(c.opts.WorkSlack)
	for _, w := range evs {
		if w.Kind != Work {
			continue
		}
		t := byRun[w.RunID]
		subject := w.Key
		switch {
		case t == nil:
			c.add(Violation{Kind: WorkAfterLoss, Subject: subject,
				Message: fmt.Sprintf("%s worked under run id %q, which was never granted", w.Exec, w.RunID),
				Events:  []Event{w}})
			continue
		case w.Mono < t.start:
			c.add(Violation{Kind: WorkAfterLoss, Subject: subject,
				Message: fmt.Sprintf("%s worked before its grant reply arrived", w.Exec),
				Events:  []Event{t.grant, w}})
			continue
		case t.lossAt != 0 && w.Mono > t.lossAt:
			c.add(Violation{Kind: WorkAfterLoss, Subject: subject,
				Message: fmt.Sprintf("%s (token %d) worked %s after it observed its lease context end",
					w.Exec, t.grant.Token, time.Duration(w.Mono-t.lossAt)),
				Events: append(t.evidence(), w)})
			continue
		case t.relAt != 0 && w.Mono > t.relAt:
			c.add(Violation{Kind: WorkAfterLoss, Subject: subject,
				Message: fmt.Sprintf("%s (token %d) worked after sending its release", w.Exec, t.grant.Token),
				Events:  append(t.evidence(), w)})
			continue
		}
		dl := max(t.inForce(w.Mono), w.Deadline)
		if w.Mono > dl+slack {
			c.add(Violation{Kind: WorkAfterLoss, Subject: subject,
				Message: fmt.Sprintf("%s (token %d) worked %s past its trust deadline (slack %s)",
					w.Exec, t.grant.Token, time.Duration(w.Mono-dl), c.opts.WorkSlack),
				Events: append(t.evidence(), w)})
			continue
		}
		for _, u := range m[t.grant.Key] {
			if u != t && w.Mono >= u.start && w.Mono < u.end {
				c.add(Violation{Kind: WorkAfterLoss, Subject: subject,
					Message: fmt.Sprintf("%s (token %d) worked while %s (token %d) owned the key",
						w.Exec, t.grant.Token, u.grant.Exec, u.grant.Token),
					Events: append(append(t.evidence(), u.grant), w)})
				break
			}
		}
	}
}

// attempts pairs write invocations with their completions, per resource.
func (c *checker) attempts(evs []Event) map[string][]attempt {
	idx := map[string]int{}
	var all []attempt
	for i := range evs {
		e := evs[i]
		switch e.Kind {
		case WriteInvoke:
			idx[opKey(e)] = len(all)
			all = append(all, attempt{invoke: e})
		case WriteComplete:
			if j, ok := idx[opKey(e)]; ok && all[j].complete == nil {
				ec := e
				all[j].complete = &ec
			}
		}
	}
	out := map[string][]attempt{}
	for _, a := range all {
		out[a.invoke.Resource] = append(out[a.invoke.Resource], a)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// staleAccepted reports accepted writes below a token accepted and completed
// on the same resource before they were invoked.
func (c *checker) staleAccepted(byRes map[string][]attempt) {
	for _, r := range sortedKeys(byRes) {
		var acc []attempt
		for _, a := range byRes[r] {
			if a.outcome() == Accepted {
				acc = append(acc, a)
			}
		}
		sort.Slice(acc, func(i, j int) bool { return acc[i].completedAt() < acc[j].completedAt() })
		maxIdx := make([]int, len(acc))
		for i := range acc {
			maxIdx[i] = i
			if i > 0 && acc[maxIdx[i-1]].invoke.Token >= acc[i].invoke.Token {
				maxIdx[i] = maxIdx[i-1]
			}
		}
		for _, x := range acc {
			n := sort.Search(len(acc), func(i int) bool { return acc[i].completedAt() >= x.invoke.Mono })
			if n == 0 {
				continue
			}
			if y := acc[maxIdx[n-1]]; y.invoke.Token > x.invoke.Token {
				c.add(Violation{Kind: StaleAccepted, Subject: r,
					Message: fmt.Sprintf("write by %s with token %d accepted after token %d had been accepted (by %s)",
						x.invoke.Exec, x.invoke.Token, y.invoke.Token, y.invoke.Exec),
					Events: []Event{y.invoke, *y.complete, x.invoke, *x.complete}})
			}
		}
	}
}

// finalState checks each Final event against the accepted writes.
func (c *checker) finalState(evs []Event, byRes map[string][]attempt) {
	for _, f := range evs {
		if f.Kind != Final {
			continue
		}
		atts := byRes[f.Resource]
		var top *attempt
		for i, a := range atts {
			if a.outcome() == Accepted && (top == nil || a.invoke.Token > top.invoke.Token) {
				top = &atts[i]
			}
		}
		var highest fence.Token
		if top != nil {
			highest = top.invoke.Token
		}
		evidence := func(extra ...attempt) []Event {
			var ev []Event
			for _, a := range extra {
				ev = append(ev, a.invoke)
				if a.complete != nil {
					ev = append(ev, *a.complete)
				}
			}
			return append(ev, f)
		}
		if f.Token < highest {
			msg := fmt.Sprintf("final state has token %d, but token %d was accepted", f.Token, highest)
			if f.Token == 0 {
				msg = fmt.Sprintf("resource is empty, but token %d was accepted", highest)
			}
			c.add(Violation{Kind: FinalState, Subject: f.Resource, Message: msg, Events: evidence(*top)})
			continue
		}
		if f.Token == 0 {
			continue // nothing accepted, nothing stored
		}
		// The final value must come from a write with the final token that
		// was accepted, or whose reply was lost, and that no accepted write
		// with the same token invoked after its completion superseded.
		var candidates, same, all []attempt
		for _, a := range atts {
			if a.invoke.Token != f.Token {
				continue
			}
			all = append(all, a)
			o := a.outcome()
			if o == Accepted || o == Unknown {
				same = append(same, a)
			}
			if a.invoke.Value == f.Value && (o == Accepted || (o == Unknown && f.Token >= highest)) {
				candidates = append(candidates, a)
			}
		}
		if len(candidates) == 0 {
			c.add(Violation{Kind: FinalState, Subject: f.Resource,
				Message: fmt.Sprintf("final value %q with token %d was not written by any accepted (or reply-lost) write with that token; highest accepted token is %d",
					f.Value, f.Token, highest),
				Events: evidence(all...)})
			continue
		}
		ok := false
		for _, a := range candidates {
			superseded := false
			for _, b := range same {
				if b.outcome() == Accepted && b.invoke.Value != a.invoke.Value && b.invoke.Mono > a.completedAt() {
					superseded = true
					break
				}
			}
			if !superseded {
				ok = true
				break
			}
		}
		if !ok {
			c.add(Violation{Kind: FinalState, Subject: f.Resource,
				Message: fmt.Sprintf("final value %q (token %d) was overwritten by a later accepted write with the same token", f.Value, f.Token),
				Events:  evidence(same...)})
		}
	}
}
