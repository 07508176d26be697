package history

import (
	"fmt"
	"time"
)

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
