package history

import (
	"fmt"
	"strings"
	"time"
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
