// Package natsguard fences writes to the keys of a NATS JetStream
// key-value bucket (github.com/nats-io/nats.go/jetstream): a write
// presenting a fencing token below the highest one a key has accepted is
// refused, and every write is a compare-and-set on the key's revision, so
// no write lands on a state it did not decide on.
//
// # Records
//
// A resource's record is a message on the bucket's subject for Key(resource)
// (every byte other than ASCII letters, digits, '-', '_' and '/' escaped as
// "=XX"). Its body is the value, unchanged, so kv.Get by any client reads
// it; its headers carry the mark:
//
//	Fencekit-Token    decimal fencing token
//	Fencekit-Run      run identity (absent when none)
//	Fencekit-Deleted  "true" on a tombstone (a fenced Delete; empty body)
//	Nats-Msg-Id       the write id, 32 hex digits, fresh for every write
//
// # Writing
//
// Put, Delete, and Fence / Do (whose callback stages
// the value with fence.Stage) read the key's latest record, apply
// fence.DecideClaim to its headers, and publish the new record with
// Nats-Expected-Last-Subject-Sequence set to the revision read (0: no
// record). The server stores it only if the key's latest revision is still
// that one; otherwise (another writer won the race) the guard reads and
// decides again, up to Config.MaxAttempts times (then fence.ErrBusy).
//
// A Guard remembers the revision and mark its own last write left on each
// key (up to 4096 keys). The next write to such a key decides on that and
// publishes at once, conditional on that revision: one request when no one
// else wrote in between, which is exact, because the condition fails
// otherwise and the guard then reads and decides again. Refusals are always
// decided on a fresh read.
//
// History and markers: a KV Delete or Purge by another client leaves a
// marker without a token. The guard treats a marker as a tombstone and
// looks up the mark in the key's history (the newest guard record before
// the marker), so with a bucket History of 2 or more a Delete does not
// erase the mark. A Purge removes the history, and with it the mark. The
// guard's own Delete writes a tombstone record, never a marker.
//
// # Lost replies
//
// A publish waits at most Config.ReplyTimeout (within the call's context)
// for its reply. When none comes, the guard sends the identical message
// again (same write id, same expected revision) on a fresh context bounded
// by Config.SettleTimeout, at most twice. JetStream answers a copy of a
// stored message as a duplicate (within the bucket's duplicate window,
// which New requires to be at least MinDuplicateWindow and longer than
// ReplyTimeout + 2 × SettleTimeout), stores it if no copy was stored and
// the key has not changed, and refuses it otherwise; in every case the
// first copy can no longer be stored later. The re-sends run on a fresh
// context (context.WithoutCancel plus SettleTimeout), also when the call's
// context has ended: a write found stored is reported as success (nil).
//
// Only a failure nats.go returns before writing the request (bad subject,
// payload too large, a draining connection, a full reconnect buffer, or a
// connection already closed when the publish starts) is reported as
// "nothing written". nats.ErrConnectionClosed during the wait, a
// disconnection, or the context's end is a lost reply: the request may
// have left. When no re-send gets a reply (on a closed connection none is
// sent) the error is a *fence.OutcomeUnknownError (fence.ErrOutcomeUnknown;
// once ctx has ended it matches ctx.Err() and context.Cause(ctx) too).
//
// When a re-send is refused because the key moved on, the first copy was
// not stored and never will be, and the guard reads and decides again. If
// it then cannot write (the context ended, the read failed) the error is a
// *fence.NotAppliedError (fence.ErrNotApplied): a request left, and it did
// not take effect. If it finds a higher mark, the *fence.StaleError has
// Overtaken set.
//
// # Metrics and logs
//
// A Guard records through package guardobs with guard="nats": admitted
// writes, stale refusals and their token gap, reuse refusals (each also
// logged at Error), and fencekit.guard.nats.retries (writes decided again
// after losing a race).
//
// # What is guaranteed
//
//   - Among writers going through natsguard, no write is stored whose token
//     is below a stored one, nor one whose token equals the mark's while
//     both carry different run identities (*fence.ReusedError). Value and
//     mark are one record.
//   - A write whose reply was lost reports success only if its record was
//     stored, and is otherwise decided again, reported as a
//     *fence.NotAppliedError (settled: not stored), or reported as a
//     *fence.OutcomeUnknownError; never as "nothing written". A lost reply
//     costs at most ReplyTimeout + 2 × SettleTimeout.
//   - A delayed copy of an earlier write of a run (a publish held in
//     transit while the guard's re-send was stored and a later write of the
//     run followed) is never stored: it carries the revision its write
//     decided on, which the later write replaced (and, within the duplicate
//     window, its write id is answered as a duplicate).
//   - A read of a resource without value (Get) returns a *fence.NotFoundError
//     matching fence.ErrNotFound.
//   - With Config.Strict, a write whose resource lies outside its claim's
//     scope, or whose claim has no scope, is refused with a
//     *fence.ScopeError before any I/O.
//   - A latest record the guard did not write (*fence.ForeignError) is neither
//     read through nor overwritten. Bad input returns a typed error before
//     any I/O.
//   - New refuses a bucket whose records expire (TTL) or are discarded when
//     it is full, unless Config.AllowExpiry is set, and a missing bucket
//     (*BucketError, ErrBucket).
//   - A nil context is refused with an error matching fence.ErrNilArgument,
//     before any I/O.
//   - Once ctx has ended, calls return an error matching ctx.Err() and
//     context.Cause(ctx), never fence.ErrBusy.
//
// # What is not guaranteed
//
//   - Writers that bypass the guard: a plain Put replaces the record (the
//     guard then refuses the key as foreign); a Purge, or a Delete on a
//     bucket keeping one record per key, erases the mark and re-admits
//     older tokens.
//   - A write whose reply was lost, settled as not stored, and then
//     refused by a newer mark is reported stale with
//     fence.StaleError.Overtaken set (the guard does not claim certainty
//     that rests on the duplicate window); one whose first copy was stored
//     before a newer write overtook it is reported as success.
//   - Durability is the stream's: a bucket with one replica on file
//     storage survives a server restart; memory storage does not.
//   - Plain buckets only (no mirrors, sources or JetStream domains).
//     Tested on nats-server 2.9.
//   - Effects of a Fence callback outside the bucket are not fenced; a
//     callback (its ctx carries the admitted claim) that staged nothing
//     raises the mark and keeps the value, or writes a tombstone over no
//     value (Get then reports fence.ErrNotFound).
package natsguard
