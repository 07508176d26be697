package history

import (
	"math"
)

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
