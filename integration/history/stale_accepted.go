package history

import (
	"fmt"

	"github.com/fencekit/fencekit/guards/guardtest"
)

// staleAccepted reports accepted writes below a token accepted and completed
// on the same resource before they were invoked. The check itself is
// guardtest.FindStaleAcceptances, shared with the conformance kit.
func (c *checker) staleAccepted(byRes map[string][]attempt) {
	for _, r := range sortedKeys(byRes) {
		var acc []attempt
		var writes []guardtest.AcceptedWrite
		for _, a := range byRes[r] {
			if a.outcome() == Accepted {
				acc = append(acc, a)
				writes = append(writes, guardtest.AcceptedWrite{Token: a.invoke.Token, Invoked: a.invoke.Mono, Completed: a.completedAt()})
			}
		}
		for _, v := range guardtest.FindStaleAcceptances(writes) {
			x, y := acc[v.Later], acc[v.Earlier]
			c.add(Violation{Kind: StaleAccepted, Subject: r,
				Message: fmt.Sprintf("write by %s with token %d accepted after token %d had been accepted (by %s)",
					x.invoke.Exec, x.invoke.Token, y.invoke.Token, y.invoke.Exec),
				Events: []Event{y.invoke, *y.complete, x.invoke, *x.complete}})
		}
	}
}
