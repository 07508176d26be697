// Package gcsguard fences writes to objects in Google Cloud Storage
// (cloud.google.com/go/storage): a write presenting a fencing token below
// the highest one an object has accepted is refused, atomically with the
// write, using only GCS's own generation preconditions.
//
// # Layout
//
// The object named by the resource holds the user's bytes, unchanged, so any
// client, signed URL or browser reads it as usual. gcsguard's state lives
// in the object's custom metadata:
//
//	fencekit-token     decimal fencing token: the resource's high-water mark
//	fencekit-run       run identity of the write (absent when it had none)
//	fencekit-write-id  32 hex digits, fresh for every write
//	fencekit-deleted   "true" on a tombstone (a zero-byte object)
//
// # Writing
//
// Put, Delete and Fence read the object's metadata, apply
// fence.DecideClaim (a lower token is stale, an equal token from a
// different run is a reuse), and write the new object with
// storage.Conditions{GenerationMatch: <generation read>}, or DoesNotExist
// when there was none. That conditional write is the commit point. GCS
// gives every write a new generation, even of identical bytes, so a stale
// writer's precondition can never pass after a newer write (the ETag ABA
// of S3 does not arise). On 412 the Guard reads the metadata again: if it
// carries the write's own write id, an earlier attempt landed and its reply
// was lost (the client library retried it): success. Otherwise it decides
// again and retries under a fresh write id, up to Config.MaxAttempts
// conditional writes in all, the first included (then fence.ErrBusy). The
// loop is the one every engine-built guard runs (guards/internal/engine),
// so MaxAttempts means what it means there, with the same default.
//
// A fenced delete writes a tombstone rather than removing the object: a
// removed object has no mark, so a stale writer could create it again.
//
// Every write (Put, PutBytes, Delete, Do) takes the claim from ctx
// (fence.ClaimFromContext: a lease's context carries its token and run
// identity, fence.WithClaim or fence.WithToken sets one from elsewhere; no
// claim: fence.ErrNoToken, nothing written). Fence implements fence.Guard
// and takes a token.
//
// # Metrics and logs
//
// With Config.MeterProvider set, a Guard counts committed writes, stale
// refusals (with their token gap), reuse refusals and conditional writes
// retried after a lost race, under the same instrument names as
// fencekit's other guards and the attribute guard="gcs"; no attribute
// names a resource or a run. Each reuse refusal is also logged at Error on
// Config.Logger with the resource, the token and both run identities.
//
// # What is guaranteed
//
//   - Among writers going through gcsguard, no write with a token below an
//     accepted one is accepted afterwards, and no write whose token equals
//     the mark while both it and the mark carry different run identities
//     (*fence.ReusedError); an equal token is accepted otherwise.
//   - Get returns the bytes of exactly the generation whose metadata it
//     reports.
//   - A write whose reply is lost and whose retry meets 412 is reported as
//     a success when its object landed, and never as success when the 412
//     was caused by someone else.
//   - Bad input (resources, tokens, run identities, options, a size that
//     the content does not match) returns a typed error and writes
//     nothing; a resource the guard refuses is a *fence.ResourceError
//     (fence.ErrInvalidResource). An object of a resource without valid
//     gcsguard metadata (*fence.ForeignError, fence.ErrForeign) is neither read
//     through nor overwritten.
//   - Once ctx has ended, calls return an error matching both ctx.Err()
//     and context.Cause(ctx) (fence.ContextError), never fence.ErrBusy.
//   - An upload that was sent and got no answer (ctx ended while it waited,
//     or the client library gave up) is settled by a read of the object's
//     metadata with a context of its own (ctx's values, not its end; at
//     most 10s): when the object carries the write's id, the write landed
//     and is reported as done, with a nil error, even though ctx has ended
//     (it was ordered before any newer token's write). Otherwise the error
//     is a *fence.OutcomeUnknownError (fence.ErrOutcomeUnknown, and ctx's
//     error and cause when it ended): the upload may still complete. A ctx
//     that ends before the upload is sent is reported as the context's end:
//     nothing was written.
//   - An upload settled by the read as replaced by a higher token's object
//     is reported as a *fence.StaleError with Overtaken set, not as an
//     unknown outcome: its generation precondition can no longer hold.
//   - A delayed copy of an earlier write of a run (an upload held in transit
//     while the client library's retry landed and a later write of the run
//     followed) is never applied: its generation precondition names the
//     generation the later write replaced.
//   - Stat, Get and GetBytes of a resource without content return a
//     *fence.NotFoundError matching fence.ErrNotFound. A nil context or a nil
//     Fence write is refused with an error matching fence.ErrNilArgument
//     (Stage and StageDelete outside a Fence callback: fence.ErrNoStager;
//     a second change: fence.ErrAlreadyStaged; after Fence returned:
//     fence.ErrStageClosed), before any I/O.
//   - With Config.Strict, a resource outside the claim's scope, or a claim
//     without a scope, is refused with a *fence.ScopeError
//     (fence.ErrOutOfScope) before anything is read or written.
//
// # What is not guaranteed
//
//   - Writers that bypass the guard: a plain write or metadata update of
//     the object replaces or edits the mark (the guard then refuses a resource
//     whose metadata it cannot read as *fence.ForeignError), and a plain delete
//     erases it.
//   - When a write's reply is lost and, before the retry, a newer holder's
//     write lands, the write is reported as stale (or, once ctx has ended,
//     as the context's end) although it was briefly visible; the final
//     state is that of the highest token.
//     When the library's retry met 412 the guard cannot tell it from a race
//     with another writer, and Overtaken stays unset; it is set when the
//     guard itself saw the reply lost (the library gave up, or ctx ended
//     while it waited) and its settling read found a higher token. No
//     outcome is settled as "not applied" (fence.ErrNotApplied): an upload
//     in flight can still complete until the object's generation moves on.
//   - An unknown outcome that the settling read cannot resolve stays
//     unknown: read the resource back, or retry with the same claim (an equal
//     token is admitted).
//   - The tests run against an emulator (fake-gcs-server); the
//     preconditions relied on here were checked there, not on GCS itself.
//   - Fencing orders writers by token; it does not say whether a lease is
//     still held.
package gcsguard
