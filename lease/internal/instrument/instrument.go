// Package instrument names the lease package's OpenTelemetry instruments
// and the values of their attributes, in one place: lease records them and
// leaseops exports them for dashboards and alerts. No attribute value
// carries an account id, a session id, a run id or a token.
package instrument

// Instrument names.
const (
	Acquired        = "fencekit.lease.acquired"
	Refused         = "fencekit.lease.refused"
	Lost            = "fencekit.lease.lost"
	Released        = "fencekit.lease.released"
	Held            = "fencekit.lease.held"
	AcquireDuration = "fencekit.lease.acquire.duration"
	WaitDuration    = "fencekit.lease.wait.duration"
	RenewDuration   = "fencekit.lease.renewal.duration"
	RenewTTLFrac    = "fencekit.lease.renewal.ttl_fraction"
	CancelDelay     = "fencekit.lease.loss.cancel_delay"
	RunOverrun      = "fencekit.lease.run.overrun"
	JanitorDeleted  = "fencekit.lease.janitor.deleted"
	// ListenerProbesLost counts delivery probes that did not come back.
	ListenerProbesLost = "fencekit.lease.listener.probes_lost"
	// ListenerFallback is the number of Managers polling because their
	// listener does not receive notifications.
	ListenerFallback = "fencekit.lease.listener.fallback"
	// HeartbeatStarted counts heartbeat epochs a Manager started (heartbeat
	// mode: one at the first grant, one after each lost heartbeat).
	HeartbeatStarted = "fencekit.lease.heartbeat.started"
	// HeartbeatLost counts heartbeat epochs that ended other than by Close,
	// by cause (CauseRenewalRejected, CauseTrustDeadline,
	// CauseDatabaseError); each ended every lease of its Manager.
	HeartbeatLost = "fencekit.lease.heartbeat.lost"
)

// Values of the "reason" attribute of Refused.
const (
	ReasonHeld              = "held"
	ReasonUnauthorized      = "unauthorized"
	ReasonError             = "error"
	ReasonTokenFloor        = "token_floor"
	ReasonFailoverUnchecked = "failover_unchecked"
)

// Values of the "error.type" attribute of AcquireDuration and WaitDuration,
// present only when the call failed (OpenTelemetry's convention).
const (
	ErrorHeld              = "held"
	ErrorUnauthorized      = "unauthorized"
	ErrorBusy              = "busy"
	ErrorTokenFloor        = "token_floor"
	ErrorFailoverUnchecked = "failover_unchecked"
	ErrorClosed            = "closed"
	ErrorCanceled          = "canceled"
	ErrorDeadlineExceeded  = "deadline_exceeded"
	ErrorOther             = "_OTHER"
)

// Values of the "cause" attribute of Lost, CancelDelay and RunOverrun.
const (
	CauseRenewalRejected = "renewal_rejected"
	CauseTrustDeadline   = "trust_deadline"
	CauseDatabaseError   = "database_error"
	CauseTakenOver       = "taken_over"
)
