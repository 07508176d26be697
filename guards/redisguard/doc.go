// Package redisguard fences writes to Redis keys
// (github.com/redis/go-redis/v9): a write presenting a fencing token below
// the highest one a resource has accepted is refused, in the same atomic
// step as the write, by a Lua script the server runs.
//
// # Layout
//
// A resource's value lives at the key named by the resource itself, as a
// plain string any client can GET. Its mark is a hash beside it:
//
//	<MarkPrefix>{<resource>}           for a resource without a hash tag
//	<MarkPrefix>{<tag>}<resource>      for a resource with a hash tag {<tag>}
//
// with the fields t (the token, canonical decimal), r (the run identity,
// empty when none) and w (the write id of the write that set it). The mark
// key's hash tag is the value key's slot, so on Redis Cluster both keys
// are in one slot and the script may touch them together. The default
// MarkPrefix is "fencekit:mark:". A resource that has no non-empty hash
// tag and contains '}', or that starts with MarkPrefix, is refused
// (*ResourceError, matching fence.ErrInvalidResource).
//
// # Writing
//
// Put, PutClaim, Delete and DeleteClaim run one script (EVALSHA, falling
// back to EVAL when the server has not cached it) that reads the mark,
// applies fence.DecideClaim (a lower token is stale, the mark's token from
// another run is a reuse), and only when admitted sets the value (SET, with
// PX Config.TTL when set; DEL for a delete) and the mark (fence.NextMark,
// and the write's id). Tokens are compared as decimal strings in the
// script, never as Lua numbers. A fenced delete removes the value and
// keeps the mark; an expired value keeps its mark too.
//
// Fence (fence.Guard) and Do run a callback that stages the new value
// with Stage or StageDelete; the script then writes it as above.
//
// # Lost replies
//
// Every write carries a fresh 128-bit write id. When the request may have
// reached the server but no reply came (a timeout, a broken connection,
// the context ending mid-request), the guard settles it on a fresh context
// bounded by Config.SettleTimeout: if the mark carries the write id, the
// write was applied and the call succeeds. Otherwise a per-write cancel key
// (beside the mark, one hour) is set in the same script, so the request
// can never be applied later; if the mark is below the write's token the
// write is sent again with a new id (up to Config.MaxAttempts writes per
// call). The client's own retries of one request are harmless: a request
// whose write id is already the mark's is not applied twice.
//
// # Metrics and logs
//
// A Guard records through package guardobs with guard="redis": admitted
// writes, stale refusals and their token gap, reuse refusals (each also
// logged at Error on Config.Logger), and fencekit.guard.redis.retries.
//
// # What is guaranteed
//
//   - Among writers going through redisguard, no write is applied whose
//     token is below an applied one, nor one whose token equals the mark's
//     while both carry different run identities (*fence.ReusedError).
//     Value and mark change together or not at all.
//   - Get returns a value and the mark that was written with it, read in
//     one script.
//   - A write whose reply was lost is settled by its write id with a
//     request on a fresh context (context.WithoutCancel plus
//     Config.SettleTimeout), also when the call's context has ended: it
//     reports success (nil) only if it was applied, and after it is settled
//     as not applied it never will be. When the settling request itself
//     fails, or the mark has the write's token under another write's id,
//     the error is a *fence.OutcomeUnknownError (fence.ErrOutcomeUnknown;
//     once ctx has ended it matches ctx.Err() and context.Cause(ctx) too):
//     the write may have been applied, never "nothing written".
//   - With Config.Strict, a write whose resource lies outside its claim's
//     scope, or whose claim has no scope, is refused with a
//     *fence.ScopeError before any I/O.
//   - Bad input (resource, token, run, config) returns a typed error
//     before any I/O. A mark the guard cannot read (malformed token or
//     run, a key of another type) refuses the write with *MarkError and
//     nothing is written.
//   - New refuses a server whose maxmemory-policy is allkeys-* unless
//     Config.AllowEviction is set (*EvictionError).
//   - Once ctx has ended, calls return an error matching ctx.Err() and
//     context.Cause(ctx), never fence.ErrBusy.
//
// # What is not guaranteed
//
//   - Marks last only as long as the server keeps its keys. A restart
//     without persistence (no AOF or RDB, or a failover to a replica that
//     had not received the last writes: Redis replication is asynchronous),
//     FLUSHALL, or a policy changed to allkeys-* after New loses marks, and
//     every older token is admitted again. The guard cannot detect this;
//     run with appendonly yes (appendfsync everysec loses up to a second),
//     noeviction or volatile-*, and raise the lease database's token floor
//     after such an event. CheckEviction re-reads the policy.
//   - Writers that bypass the guard (SET or DEL of the value key, DEL or
//     HSET of the mark) are not fenced; a deleted mark re-admits older
//     tokens.
//   - A write whose reply was lost and which a newer write overtook before
//     it was settled is reported stale, although it may have been applied
//     briefly.
//   - Marks are never deleted by this package: one small hash per resource
//     ever written stays.
//   - Effects of a Fence callback outside Redis are not fenced. A Fence
//     callback that staged nothing raises the mark alone; Get then reports
//     the old value with the new mark.
//   - Fencing orders writers by token; it does not say whether a lease is
//     still held.
package redisguard
