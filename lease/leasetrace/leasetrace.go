package leasetrace

// Span names of a lease.Manager.
const (
	// SpanAcquire is one Manager.Acquire call (with the automatic floor check and
	// its second statement, when one runs).
	SpanAcquire = "fencekit.lease.acquire"
	// SpanAcquireWait is one Manager.AcquireWait call, from entry to the grant or
	// the error, over every attempt.
	SpanAcquireWait = "fencekit.lease.acquire_wait"
	// SpanTakeover is one Manager.Takeover call.
	SpanTakeover = "fencekit.lease.takeover"
	// SpanRelease is one Release call (Manager.Release or Lease.Release).
	SpanRelease = "fencekit.lease.release"
	// SpanRenew is one explicit renewal (Manager.Renew or Lease.Renew).
	SpanRenew = "fencekit.lease.renew"
	// SpanPark is one Lease.Park call.
	SpanPark = "fencekit.lease.park"
	// SpanResume is one Manager.Resume call.
	SpanResume = "fencekit.lease.resume"
	// SpanRenewBatch is one background renewal statement; it starts a trace
	// of its own and counts the leases it carried.
	SpanRenewBatch = "fencekit.lease.renew_batch"
	// SpanHeartbeat is one heartbeat statement (heartbeat renewal mode),
	// renewing every lease of a Manager at once; like SpanRenewBatch it starts
	// a trace of its own, with AttrManagerID and the AttrBatch* counts.
	SpanHeartbeat = "fencekit.lease.heartbeat"
	// SpanRun is one Manager.Run call: its Acquire, fn (whose ctx carries this span,
	// so guarded writes in fn are its children) and the Release.
	SpanRun = "fencekit.lease.run"
	// SpanLost is the end of a lease by loss (taken over, renewal refused,
	// trust deadline passed), in the trace of the call that acquired it:
	// from the detection (or the trust deadline) to the cancellation of the
	// lease's context.
	SpanLost = "fencekit.lease.lost"
)

// Attribute keys of the spans. Unlike metric attributes, span attributes
// carry identifiers: the key's account and session ids, the run id and the
// token.
const (
	AttrAccountID       = "fencekit.lease.account_id"
	AttrSessionID       = "fencekit.lease.session_id"
	AttrRunID           = "fencekit.lease.run_id"
	AttrToken           = "fencekit.lease.token"            //nolint:gosec // G101: an attribute key, not a credential
	AttrHolder          = "fencekit.lease.holder"           // the grant's lease.WithHolder label, when set
	AttrOutcome         = "fencekit.lease.outcome"          // a value of docs/operations.md, "Tracing", or a ReleaseResult's String
	AttrDisplacedRunID  = "fencekit.lease.displaced_run_id" // Takeover: the run it displaced, when one held the key
	AttrHeldByRunID     = "fencekit.lease.held_by.run_id"   // outcome held: the holder's run id
	AttrHeldByToken     = "fencekit.lease.held_by.token"    //nolint:gosec // G101: an attribute key (outcome held: the holder's token)
	AttrCause           = "fencekit.lease.cause"            // SpanLost: taken_over, renewal_rejected, trust_deadline, database_error
	AttrManagerID       = "fencekit.lease.manager_id"       // SpanHeartbeat: the heartbeat epoch (fencekit_managers.manager_id)
	AttrBatchLeases     = "fencekit.lease.batch.leases"     // SpanRenewBatch, SpanHeartbeat: leases in the statement
	AttrBatchRenewed    = "fencekit.lease.batch.renewed"    // SpanRenewBatch: leases renewed
	AttrBatchLost       = "fencekit.lease.batch.lost"       // SpanRenewBatch: leases the database refused (each ends with a SpanLost)
	AttrTrustDeadlineIn = "fencekit.lease.trust_remaining"  // SpanRenew: seconds of trust after the renewal
)
