package history

import (
	"fmt"
	"sort"

	"github.com/fencekit/fencekit/fence"
)

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
