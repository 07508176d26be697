package guardtest

// The checks Checks reaches, and the history types and helpers behind
// them, are unexported; the package's own tests use some of them directly.
var (
	CheckFenceClaim       = checkFenceClaim
	CheckFenceMissing     = checkFenceMissing
	CheckLinearizable     = checkLinearizable
	CheckOutcomeUnknown   = checkOutcomeUnknown
	CheckStrictScope      = checkStrictScope
	CheckDelayedDuplicate = checkDelayedDuplicate

	CheckHistory             = checkHistory
	CheckLinearizableHistory = checkLinearizableHistory
	LinearizablePlan         = linearizablePlan
	RunHistory               = runHistory
	Workload                 = workload
	InvalidResources         = invalidResources
)

type (
	Attempt          = plannedAttempt
	Observation      = observation
	History          = concHistory
	LinearHistory    = linearHistory
	LinearWrite      = linearWrite
	PlannedWrite     = plannedWrite
	Fault            = faultKind
	State            = resState
	UnsupportedError = unsupportedError
)

const (
	DefaultWriters       = defaultWriters
	DefaultRounds        = defaultRounds
	DefaultResources     = defaultResources
	DefaultReaders       = defaultReaders
	DefaultPrefix        = defaultPrefix
	DefaultTimeout       = defaultTimeout
	DefaultFaultRounds   = defaultFaultRounds
	DefaultFaultEvery    = defaultFaultEvery
	DefaultDeliveryDelay = defaultDeliveryDelay
	DefaultSearchTimeout = defaultSearchTimeout

	InterfaceFencer          = interfaceFencer
	InterfaceOutcomeWriter   = interfaceOutcomeWriter
	InterfaceDuplicateWriter = interfaceDuplicateWriter
	DelayedWriteTimeout      = delayedWriteTimeout

	FaultNone    = faultNone
	FaultHeld    = faultHeld
	FaultDelayed = faultDelayed
)
