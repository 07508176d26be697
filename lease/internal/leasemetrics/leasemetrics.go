package leasemetrics

// Instrument names of a lease.Manager.
const (
	// Acquired counts grants (Acquire, AcquireWait, Takeover). No attribute.
	Acquired = "fencekit.lease.acquired"
	// Refused counts acquire attempts that granted nothing, by AttrReason.
	Refused = "fencekit.lease.refused"
	// Lost counts leases that ended without Release or Close, by AttrCause.
	Lost = "fencekit.lease.lost"
	// Released counts release statements, by AttrResult.
	Released = "fencekit.lease.released"
	// Held is the number of leases held now (an up-down counter, so that
	// Managers sharing a MeterProvider add up). No attribute.
	Held = "fencekit.lease.held"
	// AcquireDuration is the round trip of each acquire or takeover
	// statement; AttrErrorType only when it granted nothing.
	AcquireDuration = "fencekit.lease.acquire.duration"
	// WaitDuration is how long each AcquireWait call took; AttrErrorType
	// only when it failed.
	WaitDuration = "fencekit.lease.wait.duration"
	// RenewalDuration is the round trip of each renewal statement, by
	// AttrOutcome.
	RenewalDuration = "fencekit.lease.renewal.duration"
	// RenewalTTLFraction is that round trip divided by the TTL, by
	// AttrOutcome.
	RenewalTTLFraction = "fencekit.lease.renewal.ttl_fraction"
	// LossCancelDelay is the time from a lease's end (trust deadline,
	// refused renewal, takeover) to its context being cancelled, by
	// AttrCause.
	LossCancelDelay = "fencekit.lease.loss.cancel_delay"
	// RunOverrun is how long Run's function kept running after its lease
	// was lost, by AttrCause.
	RunOverrun = "fencekit.lease.run.overrun"
	// ListenerProbesLost counts delivery probes of a Manager's listener
	// that did not come back. No attribute.
	ListenerProbesLost = "fencekit.lease.listener.probes_lost"
	// ListenerFallback is the number of Managers polling because their
	// listener receives no notifications (behind a pooler in transaction
	// mode without lease.Config.ListenConnString). No attribute.
	ListenerFallback = "fencekit.lease.listener.fallback"
	// HeartbeatStarted counts the heartbeat epochs Managers started
	// (lease.RenewalHeartbeat: one at the first grant, one after each lost
	// heartbeat). No attribute.
	HeartbeatStarted = "fencekit.lease.heartbeat.started"
	// HeartbeatLost counts heartbeat epochs that ended other than by Close,
	// by AttrCause (CauseRenewalRejected, CauseTrustDeadline,
	// CauseDatabaseError); each ended every lease of its Manager. A
	// heartbeat's round trip is recorded in RenewalDuration like a batched
	// renewal's.
	HeartbeatLost = "fencekit.lease.heartbeat.lost"
)

// Instrument name of a leaseops.Janitor.
const (
	// JanitorDeleted counts rows deleted by housekeeping, by AttrTable.
	JanitorDeleted = "fencekit.lease.janitor.deleted"
)

// Attribute keys.
const (
	// AttrReason is the attribute of Refused (Reason* values).
	AttrReason = "reason"
	// AttrCause is the attribute of Lost, LossCancelDelay and RunOverrun
	// (Cause* values).
	AttrCause = "cause"
	// AttrOutcome is the attribute of RenewalDuration and
	// RenewalTTLFraction (Outcome* values).
	AttrOutcome = "outcome"
	// AttrResult is the attribute of Released (Result* values).
	AttrResult = "result"
	// AttrErrorType is the attribute of AcquireDuration and WaitDuration,
	// present only when the call failed (OpenTelemetry's convention;
	// ErrorType* values).
	AttrErrorType = "error.type"
	// AttrTable is the attribute of JanitorDeleted (Table* values).
	AttrTable = "table"
)

// Values of AttrReason.
const (
	// ReasonHeld: another run holds the key.
	ReasonHeld = "held"
	// ReasonUnauthorized: the Authorizer refused; no statement was sent.
	ReasonUnauthorized = "unauthorized"
	// ReasonError: the statement failed (network, timeout, server error).
	ReasonError = "error"
	// ReasonTokenFloor: the database refused the drawn token (token floor).
	ReasonTokenFloor = "token_floor"
	// ReasonFailoverUnchecked: the token floor was not checked on this
	// database node since a failover or restore.
	ReasonFailoverUnchecked = "failover_unchecked"
)

// Values of AttrErrorType.
const (
	ErrorTypeHeld              = "held"               // lease.ErrHeld
	ErrorTypeUnauthorized      = "unauthorized"       // lease.ErrUnauthorized
	ErrorTypeBusy              = "busy"               // lease.ErrBusy
	ErrorTypeTokenFloor        = "token_floor"        // lease.ErrTokenFloor
	ErrorTypeFailoverUnchecked = "failover_unchecked" // lease.ErrFailoverUnchecked
	ErrorTypeClosed            = "closed"             // lease.ErrClosed
	ErrorTypeCanceled          = "canceled"           // context.Canceled
	ErrorTypeDeadlineExceeded  = "deadline_exceeded"  // context.DeadlineExceeded
	// ErrorTypeOther: any other failure (network, server error).
	ErrorTypeOther = "_OTHER"
)

// Values of AttrCause.
const (
	// CauseRenewalRejected: the database refused a renewal (lease.ErrLost).
	CauseRenewalRejected = "renewal_rejected"
	// CauseTrustDeadline: the trust deadline passed and no renewal
	// statement had failed since the last success — the renewer was late
	// (process pause, overloaded host) or a statement was still in flight.
	CauseTrustDeadline = "trust_deadline"
	// CauseDatabaseError: the trust deadline passed after at least one
	// renewal statement failed (database down, partition, timeout).
	CauseDatabaseError = "database_error"
	// CauseTakenOver: another run took the key over (lease.ErrTakenOver).
	CauseTakenOver = "taken_over"
)

// Values of AttrOutcome.
const (
	// OutcomeOK: the renewal statement renewed.
	OutcomeOK = "ok"
	// OutcomeRejected: the database refused the renewal (lease.ErrLost).
	OutcomeRejected = "rejected"
	// OutcomeError: the statement failed.
	OutcomeError = "error"
)

// Values of AttrResult: the lease.ReleaseResult of the statement (its
// String method returns these), or ResultError.
const (
	ResultReleased        = "released"         // lease.ReleaseDone
	ResultAlreadyReleased = "already-released" // lease.ReleaseAlreadyDone
	ResultExpired         = "expired"          // lease.ReleaseExpired
	ResultNotHolder       = "not-holder"       // lease.ReleaseNotHolder
	ResultNotFound        = "not-found"        // lease.ReleaseNotFound
	// ResultError: the statement failed.
	ResultError = "error"
)

// Values of AttrTable.
const (
	// TableLeases: rows of fencekit_leases released or expired longer ago
	// than the retention.
	TableLeases = "leases"
	// TableDisplaced: records of runs displaced by a takeover or revoked.
	TableDisplaced = "displaced"
	// TableManagers: heartbeat rows of Managers' ended epochs.
	TableManagers = "managers"
)
