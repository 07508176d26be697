package demo

import (
	"encoding/json"
	"sync"
	"time"
)

// Actor names who did something in the scenario.
type Actor string

// The actors of the scenario and of the subcommands.
const (
	ActorA       Actor = "desktop/A"     // the desktop client's run A
	ActorB       Actor = "browser/B"     // the browser client's run B
	ActorC       Actor = "desktop/C"     // the desktop's run C (second scene), displaced while alive
	ActorD       Actor = "browser/D"     // the browser's run D (second scene), which takes C over
	ActorRetry   Actor = "desktop/retry" // a plain second acquisition while B holds
	ActorIntrude Actor = "intruder"      // a client not authorised for the account
	ActorNet     Actor = "network"       // the simulated stall (netproxy)
	ActorDemo    Actor = "demo"          // the scenario itself
	ActorCheck   Actor = "check"         // the end-state checks
	ActorCLI     Actor = "cli"           // a subcommand run by hand
)

// Kind is what an event records.
type Kind string

// Event kinds.
const (
	KindAuthorize Kind = "authorize"  // the lease Authorizer ran
	KindAcquire   Kind = "acquire"    // Acquire / AcquireWait returned
	KindRenew     Kind = "renew"      // a renewal returned
	KindWork      Kind = "work"       // a tool call started or progressed
	KindStall     Kind = "stall"      // the network to run A was blackholed
	KindHeal      Kind = "heal"       // the network to run A was restored
	KindLeaseEnd  Kind = "lease-end"  // a lease's context ended (with its cause)
	KindTakeover  Kind = "takeover"   // Manager.Takeover returned
	KindInspect   Kind = "inspect"    // Manager.Inspect answered
	KindWriteSent Kind = "write-sent" // a guarded write left the client
	KindWrite     Kind = "write"      // a guarded write returned
	KindRelease   Kind = "release"    // a release returned
	KindReconcile Kind = "reconcile"  // a client set its UI from the server's answer
	KindCheck     Kind = "check"      // one end-state check
	KindInfo      Kind = "info"       // anything else worth a line
)

// Outcome is how an event ended.
type Outcome string

// Outcomes.
const (
	OK           Outcome = "ok"           // it worked
	Pending      Outcome = "pending"      // sent, no reply yet
	Held         Outcome = "held"         // the lease is held by another run
	Stale        Outcome = "stale"        // a guard refused a stale token
	Lost         Outcome = "lost"         // the lease was lost or is no longer this run's
	Unauthorized Outcome = "unauthorized" // the Authorizer refused
	Failed       Outcome = "failed"       // an error or a failed check
	Note         Outcome = "info"         // informational
)

// Refused reports whether o is a refusal by fencekit (held, stale, lost,
// unauthorized), as opposed to success, information or an error.
func (o Outcome) Refused() bool {
	return o == Held || o == Stale || o == Lost || o == Unauthorized
}

// Event is one line of the timeline. The scenario's outcome is asserted from
// these fields, never from Detail's wording.
type Event struct {
	Seq       int           `json:"seq"`                 // 1, 2, … in emission order
	At        time.Duration `json:"-"`                   // offset from the start of the run (monotonic clock)
	Actor     Actor         `json:"actor"`               // who
	Kind      Kind          `json:"kind"`                // what
	Outcome   Outcome       `json:"outcome"`             // how it ended
	Token     int64         `json:"token,omitempty"`     // the fencing token held or presented (0: none)
	RunID     string        `json:"run_id,omitempty"`    // the run concerned
	Store     string        `json:"store,omitempty"`     // "s3" or "pg" for writes and marks
	Resource  string        `json:"resource,omitempty"`  // the guarded resource
	Presented int64         `json:"presented,omitempty"` // a stale refusal's presented token
	Highest   int64         `json:"highest,omitempty"`   // a stale refusal's highest accepted token
	Status    string        `json:"status,omitempty"`    // lease status for inspect and reconcile
	Cause     string        `json:"cause,omitempty"`     // error or context cause
	Detail    string        `json:"detail"`              // one human sentence
	// Until, when non-zero, is the offset at which something the event
	// announces ends (a lease's trust deadline, a database expiry).
	Until time.Duration `json:"-"`
}

// MarshalJSON adds at_ms (and until_ms) to the plain fields.
func (e Event) MarshalJSON() ([]byte, error) {
	type plain Event
	out := struct {
		AtMS float64 `json:"at_ms"`
		plain
		UntilMS float64 `json:"until_ms,omitempty"`
	}{AtMS: ms(e.At), plain: plain(e), UntilMS: ms(e.Until)}
	return json.Marshal(out)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (e *Event) UnmarshalJSON(b []byte) error {
	type plain Event
	in := struct {
		AtMS float64 `json:"at_ms"`
		*plain
		UntilMS float64 `json:"until_ms"`
	}{plain: (*plain)(e)}
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	e.At = time.Duration(in.AtMS * float64(time.Millisecond))
	e.Until = time.Duration(in.UntilMS * float64(time.Millisecond))
	return nil
}

func ms(d time.Duration) float64 {
	return float64(d.Microseconds()) / 1000
}

// Recorder timestamps events against its start (monotonic clock), keeps
// them, and hands each to its sink as it happens. It is safe for concurrent
// use; events are numbered and kept in emission order.
type Recorder struct {
	start  time.Time
	mu     sync.Mutex
	events []Event
	sink   func(Event)
}

// NewRecorder starts the clock now. sink, if non-nil, is called with every
// event, under the Recorder's lock (so calls never overlap).
func NewRecorder(sink func(Event)) *Recorder {
	return &Recorder{start: time.Now(), sink: sink}
}

// Since is the offset of t from the Recorder's start.
func (r *Recorder) Since(t time.Time) time.Duration { return t.Sub(r.start) }

// Emit timestamps e, numbers it, keeps it and passes it to the sink. It
// returns the stored event.
func (r *Recorder) Emit(e Event) Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.At = time.Since(r.start)
	e.Seq = len(r.events) + 1
	r.events = append(r.events, e)
	if r.sink != nil {
		r.sink(e)
	}
	return e
}

// Events returns a copy of the events so far.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}
