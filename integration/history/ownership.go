package history

import (
	"fmt"
)

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
