package leaseops

import "github.com/fencekit/fencekit/lease/internal/instrument"

// Names of the OpenTelemetry instruments a lease.Manager (and the Janitor)
// record, through the MeterProvider of their Config. docs/operations.md
// documents each with its unit and attributes. No attribute carries an
// account id, a session id, a run id or a token: every attribute value comes
// from the small fixed sets below.
const (
	MetricAcquired = instrument.Acquired
	MetricRefused  = instrument.Refused
	MetricLost     = instrument.Lost
	MetricReleased = instrument.Released
	MetricHeld     = instrument.Held
	// MetricAcquireDuration and MetricWaitDuration carry "error.type"
	// (ErrorType* values) when the call failed, and no attribute otherwise.
	MetricAcquireDuration = instrument.AcquireDuration
	MetricWaitDuration    = instrument.WaitDuration
	MetricRenewDuration   = instrument.RenewDuration
	MetricRenewTTLFrac    = instrument.RenewTTLFrac
	MetricCancelDelay     = instrument.CancelDelay
	MetricRunOverrun      = instrument.RunOverrun
	MetricJanitorDeleted  = instrument.JanitorDeleted
	// MetricListenerProbesLost counts delivery probes of a Manager's
	// listener that did not come back; MetricListenerFallback is the number
	// of Managers polling because their listener receives no notifications
	// (behind a pooler in transaction mode without
	// lease.Config.ListenConnString). Neither has attributes.
	MetricListenerProbesLost = instrument.ListenerProbesLost
	MetricListenerFallback   = instrument.ListenerFallback
	// MetricHeartbeatStarted counts the heartbeat epochs Managers started
	// (lease.RenewalHeartbeat: one at the first grant, one after each lost
	// heartbeat; no attributes). MetricHeartbeatLost counts those that
	// ended other than by Close, by "cause" (CauseRenewalRejected,
	// CauseTrustDeadline, CauseDatabaseError): each ended every lease its
	// Manager held. A heartbeat's round trip is recorded in
	// MetricRenewDuration like a batched renewal's.
	MetricHeartbeatStarted = instrument.HeartbeatStarted
	MetricHeartbeatLost    = instrument.HeartbeatLost
)

// Values of the "reason" attribute of MetricRefused.
const (
	// ReasonHeld: another run holds the key.
	ReasonHeld = instrument.ReasonHeld
	// ReasonUnauthorized: the Authorizer refused; no statement was sent.
	ReasonUnauthorized = instrument.ReasonUnauthorized
	// ReasonError: the statement failed (network, timeout, server error).
	ReasonError = instrument.ReasonError
	// ReasonTokenFloor: the database refused the drawn token (token floor).
	ReasonTokenFloor = instrument.ReasonTokenFloor
	// ReasonFailoverUnchecked: the token floor was not checked on this
	// database node since a failover or restore.
	ReasonFailoverUnchecked = instrument.ReasonFailoverUnchecked
)

// Values of the "error.type" attribute of MetricAcquireDuration and
// MetricWaitDuration.
const (
	ErrorTypeHeld              = instrument.ErrorHeld
	ErrorTypeUnauthorized      = instrument.ErrorUnauthorized
	ErrorTypeBusy              = instrument.ErrorBusy
	ErrorTypeTokenFloor        = instrument.ErrorTokenFloor
	ErrorTypeFailoverUnchecked = instrument.ErrorFailoverUnchecked
	ErrorTypeClosed            = instrument.ErrorClosed
	ErrorTypeCanceled          = instrument.ErrorCanceled
	ErrorTypeDeadlineExceeded  = instrument.ErrorDeadlineExceeded
	// ErrorTypeOther: any other failure (network, server error).
	ErrorTypeOther = instrument.ErrorOther
)

// Values of the "cause" attribute of MetricLost, MetricCancelDelay and
// MetricRunOverrun.
const (
	// CauseRenewalRejected: the database refused a renewal (lease.ErrLost).
	CauseRenewalRejected = instrument.CauseRenewalRejected
	// CauseTrustDeadline: the trust deadline passed and no renewal statement
	// had failed since the last success — the renewer was late (process
	// pause, overloaded host) or a statement was still in flight.
	CauseTrustDeadline = instrument.CauseTrustDeadline
	// CauseDatabaseError: the trust deadline passed after at least one
	// renewal statement failed (database down, partition, timeout).
	CauseDatabaseError = instrument.CauseDatabaseError
	// CauseTakenOver: another run took the key over (lease.ErrTakenOver).
	CauseTakenOver = instrument.CauseTakenOver
)
