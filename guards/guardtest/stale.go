package guardtest

import (
	"sort"

	"github.com/fencekit/fencekit/fence"
)

// AcceptedWrite is one accepted write on a resource as the stale-write
// check sees it: its token and the ticks of its invocation and completion on
// a clock shared by every write checked together (any unit: logical ticks,
// monotonic nanoseconds).
type AcceptedWrite struct {
	Token     fence.Token
	Invoked   int64
	Completed int64
}

// StaleAcceptance is one violation found by FindStaleAcceptances: the write
// at index Later was accepted although the write at index Earlier, with a
// higher token, had completed before Later was invoked.
type StaleAcceptance struct {
	Later, Earlier int
}

// FindStaleAcceptances is the stale-write check over a history: given the
// accepted writes of one resource (in any order), it returns every write
// accepted with a token lower than that of an accepted write completed
// before it was invoked, paired with the highest-token such write (the
// earliest-completed among equals). Results come in order of the later
// write's completion. Overlapping writes are never a violation: either may
// take effect first.
func FindStaleAcceptances(writes []AcceptedWrite) []StaleAcceptance {
	order := make([]int, len(writes))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool { return writes[order[i]].Completed < writes[order[j]].Completed })
	// maxIdx[i]: the index (into writes) of the highest token among the
	// first i+1 writes by completion.
	maxIdx := make([]int, len(order))
	for i, w := range order {
		maxIdx[i] = w
		if i > 0 && writes[maxIdx[i-1]].Token >= writes[w].Token {
			maxIdx[i] = maxIdx[i-1]
		}
	}
	var out []StaleAcceptance
	for _, x := range order {
		n := sort.Search(len(order), func(i int) bool { return writes[order[i]].Completed >= writes[x].Invoked })
		if n == 0 {
			continue
		}
		if y := maxIdx[n-1]; writes[y].Token > writes[x].Token {
			out = append(out, StaleAcceptance{Later: x, Earlier: y})
		}
	}
	return out
}
