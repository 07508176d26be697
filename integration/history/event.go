package history

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencekit/fencekit/fence"
)

// Kind names what an Event records.
type Kind string

// The kinds of event an execution records.
const (
	// AcquireGranted: the lease was granted. Token, RunID and Deadline are
	// set; Sent is when the request left, Mono when the reply arrived.
	AcquireGranted Kind = "acquire-granted"
	// AcquireRefused: another execution holds the key.
	AcquireRefused Kind = "acquire-refused"
	// AcquireError: the acquisition failed (network, timeout, ...). The
	// execution does not believe it holds the lease.
	AcquireError Kind = "acquire-error"
	// RenewOK: a renewal was accepted; Deadline is the new trust deadline.
	RenewOK Kind = "renew-ok"
	// RenewRejected: the database said the lease is no longer ours.
	RenewRejected Kind = "renew-rejected"
	// RenewError: the renewal failed without an answer.
	RenewError Kind = "renew-error"
	// Loss: the execution observed its lease context end; Cause says why.
	Loss Kind = "loss"
	// Release: the execution sent its release (Mono is when it was sent).
	Release Kind = "release"
	// WriteInvoke: a guarded write was invoked (Op links it to its
	// WriteComplete).
	WriteInvoke Kind = "write-invoke"
	// WriteComplete: a guarded write returned with Outcome.
	WriteComplete Kind = "write-complete"
	// Work: the execution took a step of work under its lease. Mono is
	// taken before the execution checked its lease context; Deadline is the
	// trust deadline it read just before.
	Work Kind = "work"
	// Final: the state of Resource read back after every execution ended.
	// Token 0 and Value "" mean the resource holds nothing.
	Final Kind = "final"
	// Fault: a fault was injected (Cause names it). Informational.
	Fault Kind = "fault"
)

// Outcome is the result of a guarded write.
type Outcome string

// Write outcomes.
const (
	// Accepted: the guard accepted the write and the write committed.
	Accepted Outcome = "accepted"
	// Stale: the guard refused the token as lower than its mark.
	Stale Outcome = "stale"
	// Failed: the write did not happen (busy, validation, a definite
	// error before anything was sent).
	Failed Outcome = "failed"
	// Unknown: the reply was lost; the write may or may not have committed.
	Unknown Outcome = "unknown"
)

// Event is one recorded step. Which fields are set depends on Kind.
type Event struct {
	Seq  int64     `json:"seq"`            // assigned by the Recorder, increasing
	Mono int64     `json:"mono"`           // CLOCK_MONOTONIC ns (see Now)
	Wall time.Time `json:"wall"`           // wall clock, for display only
	Kind Kind      `json:"kind"`           //
	Exec string    `json:"exec"`           // execution id, unique per run
	Proc int       `json:"proc,omitempty"` // OS process id of the recorder

	Key      string      `json:"key,omitempty"`      // lease key
	Token    fence.Token `json:"token,omitempty"`    // lease token / write token / final token
	RunID    string      `json:"run_id,omitempty"`   // lease run id
	Sent     int64       `json:"sent,omitempty"`     // Mono when the request left
	Deadline int64       `json:"deadline,omitempty"` // trust deadline, Mono ns

	Resource string  `json:"resource,omitempty"` // guarded resource
	Guard    string  `json:"guard,omitempty"`    // guard kind (pg, s3, http, mem)
	Op       int64   `json:"op,omitempty"`       // links WriteInvoke and WriteComplete
	Value    string  `json:"value,omitempty"`    // value written / final value
	Outcome  Outcome `json:"outcome,omitempty"`  // write outcome
	Cause    string  `json:"cause,omitempty"`    // loss cause, fault kind, error text
}

// String formats e on one line.
func (e Event) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d t=%s %s exec=%s", e.Seq, fmtMono(e.Mono), e.Kind, e.Exec)
	if e.Key != "" {
		fmt.Fprintf(&b, " key=%s", e.Key)
	}
	if e.Resource != "" {
		fmt.Fprintf(&b, " res=%s", e.Resource)
	}
	if e.Guard != "" {
		fmt.Fprintf(&b, " guard=%s", e.Guard)
	}
	if e.Token != 0 {
		fmt.Fprintf(&b, " token=%d", e.Token)
	}
	if e.Op != 0 {
		fmt.Fprintf(&b, " op=%d", e.Op)
	}
	if e.Outcome != "" {
		fmt.Fprintf(&b, " outcome=%s", e.Outcome)
	}
	if e.Value != "" {
		fmt.Fprintf(&b, " value=%q", e.Value)
	}
	if e.Sent != 0 {
		fmt.Fprintf(&b, " sent=%s", fmtMono(e.Sent))
	}
	if e.Deadline != 0 {
		fmt.Fprintf(&b, " deadline=%s", fmtMono(e.Deadline))
	}
	if e.Cause != "" {
		fmt.Fprintf(&b, " cause=%q", e.Cause)
	}
	return b.String()
}

// fmtMono prints a monotonic reading as seconds with millisecond precision.
func fmtMono(ns int64) string {
	return fmt.Sprintf("%d.%03ds", ns/1e9, (ns%1e9)/1e6)
}

// Now returns the system-wide CLOCK_MONOTONIC reading in nanoseconds. Unlike
// time.Now's monotonic reading it is comparable between processes on one
// machine.
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("history: clock_gettime(CLOCK_MONOTONIC): " + err.Error())
	}
	return ts.Nano()
}

// MonoOf converts t, which must carry a monotonic reading (as values from
// time.Now and t.Add do), to the clock of Now.
func MonoOf(t time.Time) int64 {
	return Now() + int64(time.Until(t))
}

// Recorder collects events from many goroutines. Record is safe for
// concurrent use. A Recorder can also stream each event as one JSON line to
// a writer (a child process reporting to its parent).
type Recorder struct {
	mu     sync.Mutex
	seq    int64
	events []Event
	enc    *json.Encoder
	keep   bool
	proc   int
}

// NewRecorder returns a Recorder that keeps events in memory.
func NewRecorder() *Recorder { return &Recorder{keep: true, proc: unix.Getpid()} }

// NewStreamRecorder returns a Recorder that writes each event as a JSON line
// to w as soon as it is recorded, and keeps nothing in memory.
func NewStreamRecorder(w io.Writer) *Recorder {
	return &Recorder{enc: json.NewEncoder(w), proc: unix.Getpid()}
}

// Record stamps e (Seq, Wall, Proc, and Mono unless already set) and stores
// it. It returns the stamped event.
func (r *Recorder) Record(e Event) Event {
	if e.Mono == 0 {
		e.Mono = Now()
	}
	if e.Wall.IsZero() {
		e.Wall = time.Now()
	}
	if e.Proc == 0 {
		e.Proc = r.proc
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	e.Seq = r.seq
	if r.keep {
		r.events = append(r.events, e)
	}
	if r.enc != nil {
		_ = r.enc.Encode(e) // a dead parent pipe ends the child anyway
	}
	return e
}

// Merge adds events recorded elsewhere (another process), keeping their Mono,
// Wall and Proc and giving them new sequence numbers.
func (r *Recorder) Merge(events ...Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range events {
		r.seq++
		e.Seq = r.seq
		if r.keep {
			r.events = append(r.events, e)
		}
	}
}

// Events returns a copy of the recorded events in sequence order.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// Decode reads JSON-line events (as a stream Recorder writes them) from rd
// until EOF. A truncated last line (a killed writer) is ignored; any other
// malformed line is an error.
func Decode(rd io.Reader) ([]Event, error) {
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var out []Event
	var pending error
	for sc.Scan() {
		if pending != nil {
			return out, pending
		}
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		var e Event
		if err := json.Unmarshal(line, &e); err != nil {
			pending = fmt.Errorf("history: bad event line %q: %w", truncate(string(line)), err)
			continue
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

func truncate(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

// byTime sorts events by Mono, then Seq.
func byTime(events []Event) {
	sort.SliceStable(events, func(i, j int) bool {
		if events[i].Mono != events[j].Mono {
			return events[i].Mono < events[j].Mono
		}
		return events[i].Seq < events[j].Seq
	})
}
