// Package memguard is an in-process fence.Guard: it fences resources that
// live inside one process (an in-memory cache, a local file written by one
// process, a test double of a real store).
//
// A Guard keeps, per resource name, a high-water mark (a token and the run
// identity that set it) and a lock. Do, the ctx-first form, presents the
// claim ctx carries (a lease context's, or fence.WithClaim /
// fence.WithToken); Fence presents an explicit token, with ctx's run identity
// when ctx's claim is for that token (fence.ClaimFor). Either takes the
// resource's lock, applies fence.DecideClaim to the mark, runs write while
// still holding the lock, and stores fence.NextMark only if write returned
// nil. Waiting for the lock is bounded by ctx.
//
// # What is guaranteed
//
//   - Admission, write and mark update of one resource are serialised: no
//     write with a lower token is admitted once a higher one has been
//     accepted, and two admitted writes never run at the same time on one
//     resource. Different resources do not block each other.
//   - A refused call (stale token, reused token, invalid token, run, scope
//     or resource name, no claim in ctx for Do, ctx done before the lock was
//     taken) does not call write and changes nothing.
//   - A token equal to the mark from a different run (both runs known) is
//     refused with a *fence.ReusedError (fence.ErrTokenReused), counted and
//     logged at Error; a write without a run follows the token-only rule
//     and keeps the mark's run.
//   - With Config.Strict, a write whose resource lies outside its claim's
//     scope, or whose claim has no scope, is refused with a
//     *fence.ScopeError (fence.ErrOutOfScope) and changes nothing.
//   - A nil ctx or write is refused with an error matching
//     fence.ErrNilArgument, as in every guard.
//   - write's ctx carries the admitted claim (fence.ClaimFromContext).
//   - A write that fails or panics leaves the mark unchanged and releases the
//     lock (a panic propagates to the caller).
//   - A ctx that has ended, before or while the call waits for the lock,
//     yields fence.ContextError: an error matching ctx.Err() and
//     context.Cause(ctx) (a lease's loss cause), never fence.ErrBusy; write
//     is not called.
//
// # Metrics
//
// Config.MeterProvider (OpenTelemetry; nil records nothing) receives
// fencekit.guard.accepted (writes that succeeded under an admitted token),
// fencekit.guard.stale, fencekit.guard.token_gap and fencekit.guard.reused,
// attribute guard="memory" only — never the resource name. See docs/operations.md.
//
// # What is not guaranteed
//
//   - Marks live in memory only: they are lost when the process exits and
//     are not shared with other processes. Use guards/pgguard (or another
//     persistent guard) when more than one process writes.
//   - The guard does not undo what a failed write did. If write changes
//     state and then returns an error, that change stays; only the mark is
//     not raised.
//   - Resource entries are kept for the Guard's lifetime (one small entry
//     per distinct resource name); there is no eviction.
//   - The lock is not reentrant: calling Fence for the same resource from
//     inside its own write blocks until ctx ends.
package memguard
