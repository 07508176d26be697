package history

import (
	"fmt"
	"sort"
	"time"
)

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
