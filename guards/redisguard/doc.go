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
// are in one slot and the script may touch them together. Beside them,
// <MarkPrefix>w{...} (the mark key with "w" after the prefix) is the
// resource's write-id record, a sorted set of recent write ids (see
// Duplicates and lost replies). The default
// MarkPrefix is "fencekit:mark:". A resource that has no non-empty hash
// tag and contains '}', or that starts with MarkPrefix, is refused
// (*fence.ResourceError, matching fence.ErrInvalidResource).
//
// # Writing
//
// Put and Delete run one script (EVALSHA, falling
// back to EVAL when the server has not cached it) that reads the mark,
// applies fence.DecideClaim (a lower token is stale, the mark's token from
// another run is a reuse), and only when admitted sets the value (SET, with
// PX Config.TTL when set; DEL for a delete) and the mark (fence.NextMark,
// and the write's id). Tokens are compared as decimal strings in the
// script, never as Lua numbers. A fenced delete removes the value and
// keeps the mark; an expired value keeps its mark too. A value key of
// another type (hash, list, set, ...) is not this guard's: every write to
// it is refused with a *fence.ForeignError, nothing written.
//
// Fence (fence.Guard) and Do run a callback that stages the new value
// with fence.Stage or fence.StageDelete; the script then writes it as
// above. Fence and Do read the mark and the value key's type first, and
// run no callback over a value key of another type.
//
// # Duplicates and lost replies
//
// One write's request can reach the server more than once, and late:
// go-redis re-sends a request whose reply timed out on a new connection
// (Options.MaxRetries, 3 by default) while the first copy may still be in
// transit, a cluster client re-sends on redirects, and a copy held by the
// network can arrive after the call returned and after a later write of
// the same run. Comparing the write id with the mark's alone would apply
// such a copy once a later write replaced the mark's id: the value would
// go back. So every write carries a fresh 128-bit write id and a deadline,
// this host's clock at sending plus Config.DuplicateWindow (W, 20 s by
// default). The script refuses a copy whose id it has recorded (applied:
// "dup", not applied again; cancelled) and a copy that arrives after its
// deadline by the server's clock (TIME); an applied write's id is
// recorded in the resource's write-id record until W after its deadline.
// A copy that arrives in time therefore finds its id if any copy was
// applied, and a copy that arrives later is refused, whichever Guard,
// process or client retry sent the later write. This needs no agreement
// between the host's clock and the server's for safety: the deadline and
// the record's end are both judged by the server's clock. It needs that
// clock not to step back by more than W (across restarts and failovers).
// A host whose clock is more than about W/2 behind the server's, or W
// ahead, has its writes refused with a *ClockError (ErrClockSkew). The
// record holds one id per write of the last two to three windows: a
// resource written a thousand times a second keeps tens of thousands of
// ids (a few MB); lower W for such resources (W must exceed how long the
// client's own retries of one request take; a copy that misses its
// deadline is refused and settled, never applied). This was chosen over
// refusing client retries at New: retries are go-redis's default, a
// cluster client's redirects cannot be turned off, and the guard's own
// settling needs a record that outlives every copy in any case (a cancel
// key with a TTL protects only until it expires).
//
// When the request may have reached the server but no reply came (a
// timeout, a broken connection, the context ending mid-request), the
// guard settles it on a fresh context bounded by Config.SettleTimeout: if
// the mark or the record carries the write id, the write was applied and
// the call succeeds (also when a newer write has overwritten it since).
// Otherwise the id is recorded as cancelled until the record's end, so a
// copy still in transit is refused until its deadline and by the deadline
// afterwards; if the mark is not above the write's token the write is sent
// again with a new id (up to Config.MaxAttempts writes per call), and
// after the last a *fence.NotAppliedError is returned.
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
//   - A copy of a write's request is never applied after a later write
//     of the same run (or a newer run), whatever the client's retry and
//     redirect settings, as long as the server's clock does not step back
//     by more than Config.DuplicateWindow; a write's id is applied at most
//     once.
//   - A write whose reply was lost is settled by its write id with a
//     request on a fresh context (context.WithoutCancel plus
//     Config.SettleTimeout), also when the call's context has ended: it
//     reports success (nil) only if it was applied, and after it is
//     settled as not applied it never will be: then the error is a
//     *fence.NotAppliedError (fence.ErrNotApplied), or a *fence.StaleError
//     when a newer mark is in place (Overtaken false: the record proves it
//     was never applied; true when the settling request came more than a
//     window after the deadline, when it may have been applied and then
//     overtaken). When the settling request itself fails, or came that
//     late and the mark has the write's token under another write's id,
//     the error is a *fence.OutcomeUnknownError (fence.ErrOutcomeUnknown;
//     once ctx has ended it matches ctx.Err() and context.Cause(ctx) too):
//     the write may have been applied, never "nothing written".
//   - Get of a resource without a value returns a *fence.NotFoundError, which
//     matches fence.ErrNotFound.
//   - A nil context is refused with fence.ErrNilArgument before any I/O
//     (fence.Stage and fence.StageDelete: fence.ErrNoStager); no call panics
//     on it.
//   - With Config.Strict, a write whose resource lies outside its claim's
//     scope, or whose claim has no scope, is refused with a
//     *fence.ScopeError before any I/O.
//   - Bad input (resource, token, run, config) returns a typed error
//     before any I/O. A mark the guard cannot read (malformed token or
//     run, a key of another type) refuses the write with *fence.ForeignError and
//     nothing is written. So is a value key of another type than string.
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
//   - A write whose reply was lost, settled more than a window after its
//     deadline, and which a newer write overtook is reported stale with
//     Overtaken set: it may have been applied briefly.
//   - A server clock stepped back by more than Config.DuplicateWindow (a
//     reset, a failover to a replica whose clock is behind) can admit a
//     copy whose record has gone: configure NTP to slew, not step.
//   - Write-id records use ZMSCORE and TIME in scripts: Redis 6.2 or
//     later.
//   - Marks are never deleted by this package: one small hash per resource
//     ever written stays.
//   - Effects of a Fence callback outside Redis are not fenced. A Fence
//     callback (its ctx carries the admitted claim) that staged nothing
//     raises the mark alone; Get then reports the old value with the new
//     mark, or fence.ErrNotFound for a resource that had no value.
//   - Fencing orders writers by token; it does not say whether a lease is
//     still held.
package redisguard
