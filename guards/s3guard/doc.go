// Package s3guard fences writes to objects in S3 or MinIO: a write
// presenting a fencing token below the highest one an object has accepted is
// refused, atomically with the write, using only the store's own conditional
// PUTs (If-None-Match: *, If-Match).
//
// The Guard talks to the bucket through s3client.Client, so it works with the
// SDK client its user already has: minioclient.New wraps a minio-go v7
// *minio.Client, awsclient.New an aws-sdk-go-v2 *s3.Client. Both adapters
// pass the same test suite against MinIO.
//
// # Layout
//
// The object whose key is the resource is a small JSON pointer; the content
// lives in an immutable data object next to it:
//
//	<resource>                                           pointer (application/json)
//	<DataPrefix><resource>/<token, 19 digits>-<write id> content, one per write
//
// A pointer body looks like this (see docs/guards-s3.md for every field):
//
//	{"fencekit":"s3guard/v1","token":"8","write_id":"<32 hex>","deleted":false,
//	 "data":"_fencekit/data/<resource>/0000000000000000008-<write id>",
//	 "etag":"<data object ETag>","size":4096,"content_type":"text/plain"}
//
// A plain S3 reader finds the current content by GETting the pointer and then
// the object named by its "data" field (optionally with If-Match: "<etag>").
//
// With Config.InlineMax set, content of at most that many bytes is stored in
// the pointer body itself (base64 field "inline", no "data" field): one
// conditional PUT per write and one GET per read, at the price of readers
// having to decode it. It is off by default, so that a plain reader of a
// bucket written with default settings always finds the bytes in a data
// object; a plain reader of an inlining bucket must handle both forms (see
// docs/guards-s3.md).
//
// # Writing
//
// The fenced writes Put, PutBytes, Delete and Do present the claim their
// ctx carries (a lease context's token and run identity, or
// fence.WithClaim / fence.WithToken for a claim from elsewhere); without
// one they return an error matching fence.ErrNoToken and touch nothing.
// Fence (the fence.Guard method) takes a token and presents
// fence.ClaimFor(ctx, token). All run the same steps:
//
//  1. GET the pointer; fence.DecideClaim the presented claim against the
//     pointer's token and run. A token stale against it is refused
//     (*fence.StaleError), the pointer's token presented by a different run
//     is refused (*fence.ReusedError, counted and logged at Error), both
//     before anything is uploaded.
//     Put and Delete skip the GET when the Guard's pointer cache holds the
//     key (see below).
//  2. Upload new content (Put, or Stage inside a Fence write callback) to a
//     fresh data key with If-None-Match: *. Delete stages a tombstone instead.
//  3. PUT the new pointer with If-Match: <ETag of the pointer read in 1>, or
//     If-None-Match: * when there was none. This conditional write is the
//     commit point. On 412 (or 404, or AWS's 409) re-read the pointer: if it
//     carries our write id, an earlier attempt landed and its reply was lost
//     (the SDK retried): success. Otherwise decide again against the new
//     pointer and retry under a fresh write id, up to Config.MaxAttempts
//     conditional PUTs in all (then fence.ErrBusy). The data key's write
//     id is the first PUT's, so after a lost race the pointer's write id
//     differs from it.
//  4. Remove the data object the new pointer superseded (best effort).
//
// Because every pointer body holds a fresh random write id, the pointer's
// ETag changes on every accepted write, even when a newer holder writes
// byte-identical content; so a stale writer's If-Match can never pass (the
// MD5-ETag ABA hazard of keeping the token in metadata). Deletes are
// tombstone pointers written the same way: the guard never relies on
// DeleteObject or CopyObject conditions, which MinIO ignores.
//
// The write loop is the one every engine-built guard runs
// (guards/internal/engine): Config.MaxAttempts counts the conditional
// pointer PUTs of one call, each under a fresh write id, the first
// included, and defaults to the DefaultMaxAttempts of every guard. A PUT
// decided on a stale pointer cache entry counts too; before, that first
// failure was free.
//
// # Pointer cache
//
// Each Guard remembers, for up to Config.PointerCacheSize keys (default
// DefaultPointerCacheSize, least recently used out first; negative
// disables it), the last pointer it read or wrote: its ETag, token, write id
// and data reference, without inline content or metadata. Put and Delete
// decide against that entry instead of GETting the pointer. This is safe
// because the entry is only a hint:
//
//   - An acceptance decided on the cache is tentative: the commit's
//     If-Match carries the cached ETag, so if anyone else wrote the pointer
//     since, the PUT fails (412, or 404 if it was removed), the Guard
//     re-reads and continues exactly as without a cache, including the
//     lost-reply check by write id. That first failure counts against
//     MaxAttempts like any other conditional PUT.
//   - A refusal decided on the cache would be safe too (marks only rise),
//     but it is confirmed by a read, so that StaleError.Highest is the real
//     mark and a mark erased outside the guard behaves as documented.
//   - Fence never decides on the cache (its write callback may have effects
//     of its own that must not run for a visibly stale token), nor do Get,
//     Mark and Sweep; their reads, and every commit, refresh the cache.
//
// The price: when another Guard raised the mark since this Guard last saw the
// key, a stale Put uploads its content (not inline content) before the commit
// refuses it, and then removes it.
//
// # Cost
//
// Requests per steady-state overwrite with the cache: PUT data, conditional
// PUT pointer, DELETE superseded data (not with KeepSuperseded); with inline
// content one conditional PUT. A first write to a key the Guard has not seen
// adds a GET of the pointer. docs/guards-s3.md has the measured figures and a
// choice of layout by object size.
//
// # What is guaranteed
//
//   - Among writers going through s3guard, no write with a token below an
//     accepted one is accepted afterwards (the pointer is compared and swapped
//     atomically by the store); an equal token is accepted, unless both it
//     and the pointer carry a run identity and they differ (the pointer stores
//     fence.NextMark's run with its token; pointers without one follow the
//     token-only rule).
//   - Once ctx has ended, every error matches ctx.Err() and
//     context.Cause(ctx) (a lost lease reports its cause), never
//     fence.ErrBusy; a call on an ended ctx sends nothing. This holds with
//     the pointer cache on or off: every acceptance is verified by the
//     conditional pointer PUT, never by the cache.
//   - A pointer PUT that was sent and got no answer (ctx ended while the
//     SDK waited, or the SDK gave up) is settled by a read of the pointer
//     with a context of its own (the caller's values, not its end; at most
//     10s): when the pointer carries the write's id, the write landed and
//     is reported as done, with a nil error, even though ctx has ended (it
//     was ordered before any newer token's write). Otherwise the error is
//     a *fence.OutcomeUnknownError (fence.ErrOutcomeUnknown, and ctx's
//     error and cause when it ended): the request may still land. A ctx
//     that ends before the pointer PUT is sent is reported as the
//     context's end (nothing written) and the staged data is removed.
//   - With Config.Strict, a resource outside the claim's scope, or a claim
//     without a scope, is refused with a *fence.ScopeError
//     (fence.ErrOutOfScope) before anything is read or written.
//   - Get returns the content of one pointer together with the token and
//     write id of the write that stored it; it never mixes the bytes of one
//     write with the pointer of another (the data GET carries If-Match).
//   - A write whose reply is lost and whose SDK retry meets 412 is reported as
//     a success when its pointer landed, and never as success when the 412 was
//     caused by someone else.
//   - A pointer PUT settled by the read as replaced by a higher token's
//     pointer is reported as a *fence.StaleError with Overtaken set, not as
//     an unknown outcome: its If-Match names an ETag that is gone for good.
//   - A delayed copy of an earlier write of a run (a pointer PUT held in
//     transit while the SDK's retry landed and a later write of the run
//     followed) is never applied: its If-Match names the ETag the later
//     write replaced, and every accepted pointer has a fresh ETag.
//   - Get and GetBytes of a resource without content return a
//     *fence.NotFoundError matching fence.ErrNotFound. A nil context or a nil
//     Fence write is refused with an error matching fence.ErrNilArgument
//     (Stage and StageDelete outside a Fence callback: fence.ErrNoStager;
//     a second change: fence.ErrAlreadyStaged; after Fence returned:
//     fence.ErrStageClosed), before any I/O.
//   - Bad input (invalid resources, tokens, options) returns a typed error
//     and changes nothing; a resource the guard refuses is a
//     *fence.ResourceError (fence.ErrInvalidResource). Content shorter or
//     longer than the size given to Put or Stage (0 or more) is a
//     *fence.SizeError (fence.ErrSizeMismatch): no pointer is published and data
//     uploaded for it is removed. An object at a key that is not a valid
//     pointer (*fence.ForeignError, fence.ErrForeign) is neither read through nor
//     overwritten.
//   - Staged content is invisible until its pointer is written; a refused or
//     failed write removes what it staged, unless its outcome is unknown.
//
// # What is not guaranteed
//
//   - Readers and writers that bypass the guard: a plain PUT to the user's key
//     replaces the pointer (the guard then refuses the key as *fence.ForeignError
//     until it is restored), a DeleteObject of a pointer or tombstone erases
//     the key's mark, and writes to data objects are detected only as
//     *DataError on the next Get.
//   - Cleanup after crashes: a writer that dies between staging and commit, or
//     whose outcome was unknown, leaves an unreferenced data object. Sweep
//     removes those provably dead (token below the mark, not referenced).
//   - A plain reader that reads the pointer and then the data may find the
//     data object already removed by a newer write; it must read the pointer
//     again (Get does this).
//   - When a write's reply is lost and, before the SDK's retry, a newer
//     holder's write lands, the retry's 412 cannot be told from a race with
//     another writer: the write is reported as stale without Overtaken (or,
//     once ctx has ended, as the context's end) although it was briefly
//     visible; the final state is still that of the highest token.
//     Overtaken is set only when the guard itself saw the reply lost (the
//     SDK gave up, or ctx ended while it waited) and its settling read found
//     a higher token. No outcome is settled as "not applied"
//     (fence.ErrNotApplied): a pointer PUT in flight can still land until
//     the pointer moves on.
//   - Versioned buckets work (conditions apply to the latest version), but
//     removals only add delete markers: old pointers and data stay as
//     noncurrent versions until a lifecycle rule expires them.
//   - An unknown outcome that the settling read cannot resolve stays
//     unknown: read the key back, or retry with the same claim (an equal
//     token is admitted).
//   - Fencing orders writers by token; it does not say whether a lease is
//     still held. Effects of a Fence write callback outside the Stage calls
//     are not part of the commit.
package s3guard
