// Package traceoutcome holds the values of the span attribute
// fencekit.lease.outcome (leasetrace.AttrOutcome) that package lease
// records. They are wire strings, not Go API: docs/operations.md
// ("Tracing") lists them for trace queries, and they change only in a
// release whose CHANGELOG.md says so.
package traceoutcome

// Values of AttrOutcome. A span's status is Error only for failures; a
// refusal the protocol defines is an outcome with status Unset.
const (
	OutcomeGranted           = "granted"            // Acquire, AcquireWait, Takeover, Resume
	OutcomeParked            = "parked"             // Park
	OutcomeRunActive         = "run_active"         // Resume refused: the run is active in a Manager now
	OutcomeHeld              = "held"               // refused: another run holds the key
	OutcomeUnauthorized      = "unauthorized"       // refused by the Authorizer
	OutcomeTokenFloor        = "token_floor"        // refused: sequence not above the floor
	OutcomeFailoverUnchecked = "failover_unchecked" // refused: node not checked
	OutcomeBusy              = "busy"               // aborted for concurrency; retry
	OutcomeRenewed           = "renewed"            // Renew
	OutcomeLost              = "lost"               // Renew refused; Run's lease was lost
	OutcomeTakenOver         = "taken_over"         // Renew refused (or Run's lease ended) after a Takeover
	OutcomeCompleted         = "completed"          // Run: fn returned nil and the lease was held throughout
	OutcomeFnError           = "fn_error"           // Run: fn returned an error, the lease was held throughout
	OutcomeInvalid           = "invalid"            // bad input: nothing sent
	OutcomeClosed            = "closed"             // the Manager is closed
	OutcomeCanceled          = "canceled"           // the call's context was cancelled
	OutcomeDeadlineExceeded  = "deadline_exceeded"  // the call's context deadline passed
	OutcomeError             = "error"              // the database or the network failed
)
