package history

import (
	"fmt"
	"sort"
)

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

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
