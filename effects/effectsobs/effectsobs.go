package effectsobs

// Instrument names.
const (
	// Recorded counts effects inserted by Record/RecordTx (a record of an
	// existing (lease key, request key) is not counted), by AttrTarget.
	// Inside the caller's transaction (RecordTx) the count is taken at the
	// insert: the caller's transaction may still roll back.
	Recorded = "fencekit.effects.recorded"
	// Refused counts records refused after the input checks, by
	// AttrReason (ReasonStale, ReasonConflict). Nothing was recorded.
	Refused = "fencekit.effects.refused"
	// Attempts counts delivery attempts: effects a relay claimed, by
	// AttrTarget.
	Attempts = "fencekit.effects.attempts"
	// Delivered counts effects whose delivered outcome a relay wrote, by
	// AttrTarget.
	Delivered = "fencekit.effects.delivered"
	// Rejected counts effects whose rejected outcome a relay wrote, by
	// AttrTarget.
	Rejected = "fencekit.effects.rejected"
	// Ambiguous counts effects whose ambiguous outcome a relay wrote, by
	// AttrTarget.
	Ambiguous = "fencekit.effects.ambiguous"
	// Canceled counts effects canceled by Cancel or CancelDisplaced. No
	// attribute.
	Canceled = "fencekit.effects.canceled"
	// DeliveryLatency is, for each delivered effect, the time from its
	// record (created_at, on the database clock) to the delivered outcome
	// written by the relay, in seconds, by AttrTarget.
	DeliveryLatency = "fencekit.effects.delivery.latency"
	// OldestPending is an observable gauge: the age in seconds of the
	// oldest effect that is not final (pending or sending), 0 when there is
	// none, by AttrSchema. Each running Relay observes it at every
	// collection with one query on the effects table.
	OldestPending = "fencekit.effects.oldest_pending"
)

// Metric attribute keys.
const (
	// AttrTarget is the effect's target name (a configured Target.Name).
	AttrTarget = "target"
	// AttrSchema is the effects schema (Config.Schema).
	AttrSchema = "schema"
	// AttrReason is the attribute of Refused (Reason* values).
	AttrReason = "reason"
)

// Values of AttrReason.
const (
	// ReasonStale: the claim was not the key's current, live grant
	// (fence.ErrStale, fence.ErrTokenReused).
	ReasonStale = "stale"
	// ReasonConflict: the request key was recorded before with another
	// target or request (effects.ErrConflict).
	ReasonConflict = "conflict"
)

// Span names.
const (
	// SpanRecord is the span of one record (the lease-row check and the
	// insert; Record's commit follows it), a child of the span in the
	// caller's ctx.
	SpanRecord = "fencekit.effects.record"
	// SpanDeliver is the span of one delivery attempt by a relay: the
	// Deliverer's call and the outcome write. It is the root of a trace of
	// its own (a relay works in the background); the Deliverer's ctx
	// carries it, so an instrumented client's spans nest under it. It has
	// a span link to the effect's SpanRecord when that record was traced
	// (the effect row keeps the record span's W3C traceparent), and none
	// otherwise. AttrEffectID joins the two as well.
	SpanDeliver = "fencekit.effects.deliver"
)

// Span attribute keys. Unlike metric attributes, span attributes carry
// identifiers.
const (
	AttrEffectID   = "fencekit.effects.id"          // the effect id (on both spans)
	AttrTargetName = "fencekit.effects.target"      // the target name
	AttrRequestKey = "fencekit.effects.request_key" // SpanRecord: the caller's request key
	AttrAccountID  = "fencekit.effects.account_id"  // SpanRecord: the lease key's account
	AttrSessionID  = "fencekit.effects.session_id"  // SpanRecord: the lease key's session
	AttrRunID      = "fencekit.effects.run_id"      // SpanRecord: the claim's run identity
	AttrToken      = "fencekit.effects.token"       //nolint:gosec // G101: an attribute key (SpanRecord: the claim's token)
	AttrAttempt    = "fencekit.effects.attempt"     // SpanDeliver: the attempt number (1 for the first claim)
	AttrEpoch      = "fencekit.effects.epoch"       // SpanDeliver: the claim's epoch
	AttrRelay      = "fencekit.effects.relay"       // SpanDeliver: the relay's name
	AttrOutcome    = "fencekit.effects.outcome"     // one of the Outcome* values
)

// Values of AttrOutcome. A span's status is Error only for failures
// (OutcomeError, and a delivery attempt whose outcome could not be
// written); refusals and the target's answers are outcomes.
const (
	OutcomeRecorded   = "recorded"   // SpanRecord: a new effect was inserted
	OutcomeDuplicate  = "duplicate"  // SpanRecord: the (lease key, request key) existed with the same target and request
	OutcomeStale      = "stale"      // SpanRecord: the claim was not current (fence.ErrStale)
	OutcomeReused     = "reused"     // SpanRecord: the claim's token was issued twice (fence.ErrTokenReused)
	OutcomeConflict   = "conflict"   // SpanRecord: the request key was recorded with another request
	OutcomeBusy       = "busy"       // SpanRecord: lock timeout, serialization failure, deadlock (fence.ErrBusy)
	OutcomeError      = "error"      // any other failure
	OutcomeDelivered  = "delivered"  // SpanDeliver: the target accepted
	OutcomeRejected   = "rejected"   // SpanDeliver: the target refused for good
	OutcomeAmbiguous  = "ambiguous"  // SpanDeliver: ended ambiguous
	OutcomeRetry      = "retry"      // SpanDeliver: back to pending, due after a backoff
	OutcomeSuperseded = "superseded" // SpanDeliver: another claim took the effect over; nothing written
	OutcomeAbandoned  = "abandoned"  // SpanDeliver: the outcome write failed; the claim expires and the next claim decides
)
