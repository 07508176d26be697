package history

import (
	"fmt"

	"github.com/fencekit/fencekit/fence"
)

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
