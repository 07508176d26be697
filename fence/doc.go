// Package fence defines fencing tokens and the guard contract shared by every
// fencekit store adapter.
//
// A fencing token is a positive 63-bit integer handed out with every lease
// acquisition (see package lease). Within one lease key, a later grant always
// carries a larger token. A downstream resource protected by a [Guard] keeps
// the highest token it has accepted (its high-water mark) and refuses writes
// that present a lower one, in the same atomic step as the write itself.
//
// # Decision rule
//
// For a resource whose mark is H and a write presenting token T:
//
//	T >  H  accept, raise the mark to T
//	T == H  accept (the same acquisition retrying or writing again)
//	T <  H  refuse with *StaleError{Presented: T, Highest: H}
//
// # Claims and run identity
//
// A write presents a [Claim]: its token and, optionally, the identity of the
// run that was granted it (a lease's run_id). The resource stores the run
// identity with its mark ([NextMark]). A claim whose token equals the mark but
// whose run differs from the mark's run (both present) is refused with
// *ReusedError ([ErrTokenReused]): the same token was issued twice, which a
// database restored or promoted behind the guards can do. Claims without a
// run identity follow the token-only rule above ([DecideClaim]).
//
// A lease's context carries its claim; [WithClaim] and [WithToken] attach one
// from elsewhere, and [ClaimFromContext] reads it ([ErrNoToken] if absent).
// Every guard's writes take the claim from the context, and only from there:
// a claim from elsewhere travels in ctx too (WithClaim), never as an
// argument. The one exception is [Guard]'s Fence, which takes a bare token.
//
// # Cancellation and unknown outcomes
//
// A guard whose context has ended before its write could take effect
// returns an error matching both the context's error and its cause
// ([ContextError], [WrapContext]), so a write refused because its lease was
// lost reports why, and never [ErrBusy]: nothing was written.
//
// A guard whose committing request (a COMMIT, a conditional PUT, an HTTP
// request) was sent but got no reply cannot say that: the store may have
// applied it. It returns an *[OutcomeUnknownError] ([ErrOutcomeUnknown]),
// which also matches the context's error and cause when the context ended
// meanwhile ([OutcomeUnknown]). A guard that settles the outcome afterwards
// (a read, with a fresh bounded context, that finds its own write) reports
// what it found instead: success when the write was applied, an
// *[NotAppliedError] ([ErrNotApplied]) when it proved the write did not and
// never will take effect, and a *[StaleError] with Overtaken set when a newer
// holder's mark is found (the write may have been applied, then overwritten).
//
// # Typed outcomes
//
// Every guard reports each outcome of a write with the same sentinel, so a
// caller branches once for all stores: nil (applied), [ErrStale] (refused;
// StaleError.Overtaken tells a certain refusal from an overtaken-after-lost-
// reply one), [ErrTokenReused], [ErrOutOfScope], [ErrBusy] (nothing sent or
// nothing decided; retry), [ErrNotApplied] (sent, settled as not applied;
// retry), [ErrOutcomeUnknown] (sent, may have been applied), the context's
// error (ended before anything was sent), and [ErrInvalidToken],
// [ErrInvalidResource] (a *[ResourceError]), [ErrInvalidRun] and
// [ErrNilArgument] (a nil context, callback or transaction) for bad input. A
// stored value or mark the guard did not write, or cannot read, matches
// [ErrForeign]. A read of a resource without a value matches [ErrNotFound].
// Staging ([Stage], [StageDelete]) reports [ErrNoStager],
// [ErrAlreadyStaged] and [ErrStageClosed].
//
// # Fence callbacks
//
// Every guard runs a Fence (or Do) callback with a context that carries the
// admitted claim ([ClaimFromContext]): the token Fence was given, paired
// with the run and scope of ctx's claim only when that claim is for the
// same token ([ClaimFor]). A callback that writes nothing on a resource
// never written raises the mark and makes no value appear: a later read
// matches [ErrNotFound], a lower token is stale.
//
// # Staging
//
// A guard that stores values (redisguard, natsguard, fileguard, s3guard,
// gcsguard) takes a callback's change through its context: the callback
// calls [Stage] with the new value, or [StageDelete], on the ctx it was
// given (or one derived from it), and the guard writes the change with the
// mark once the callback returns nil, deciding again; if the callback
// fails nothing is written. Code written against [Guard] (a middleware, a
// tool) so stages without knowing the concrete guard. The contract, in
// every guard:
//
//   - ctx stages into the Fence (or Do) call whose callback received it;
//     when Fence calls nest, each callback's context stages into its own
//     call, and an outer callback's context still stages into the outer
//     call;
//   - one change per callback: a second [Stage] or [StageDelete] returns
//     [ErrAlreadyStaged]; once the Fence call has returned, [ErrStageClosed];
//   - a context from no running callback (nil too), or from the callback of
//     a guard that does not stage (memguard, pgguard, mysqlguard, whose
//     callbacks write through what the guard hands them), returns
//     [ErrNoStager], also when that callback runs inside a staging guard's;
//   - a callback that stages nothing raises the mark and keeps the value.
//
// The object-store guards stage the bytes as their StageBytes does with
// zero options; their own Stage (a reader, its size, options), StageBytes
// and StageDelete stage into their own calls only. Only fencekit's guards
// take a change through Stage: the callback of a guard written elsewhere
// hands on whatever its ctx carries (ErrNoStager, or the enclosing
// staging callback's).
//
// # Scopes
//
// A claim may carry the scope of the lease key it was granted for
// (Claim.Scope: lease.Key.Scope, the prefix of every lease.Key.Resource
// name). A guard configured as strict refuses, before any I/O, a write whose
// resource is outside its claim's scope, or whose claim has none, with a
// *[ScopeError] ([ErrOutOfScope], [CheckScope]), so a claim for one key
// cannot raise the mark of another key's resource. Guards that are not
// strict ignore scopes.
//
// # What is guaranteed
//
//   - [Parse] accepts only canonical decimal text: ASCII digits, no sign, no
//     leading zero, no spaces, no more than 19 digits, value in 1..MaxInt64.
//     Every rejected input yields an error matching [ErrInvalidToken].
//   - [StaleError] matches [ErrStale] with errors.Is and carries both tokens;
//     [ReusedError] matches [ErrTokenReused] and carries both run identities;
//     [ScopeError] matches [ErrOutOfScope]. They are distinct from [ErrBusy]
//     (the resource could not decide now; retry), from [ErrOutcomeUnknown]
//     (the write may have been applied) and from infrastructure errors
//     (anything else).
//   - A [Guard] implementation runs the caller's write only when the decision
//     rule admits the token, and raises the mark if and only if the write
//     succeeds, atomically with respect to every other Fence call on the same
//     resource. Package guards/guardtest checks these properties for any
//     implementation.
//
// # What is not guaranteed
//
//   - Reuse is detected only when both the mark and the write carry a run
//     identity; a re-issued token presented without one is admitted.
//   - Scopes are checked only by strict guards; a guard that is not strict
//     lets a claim for one key raise the mark of another key's resource.
//   - [JoinResource] makes names unambiguous; it does not make two sessions'
//     resources independent unless each session's writes use its own name.
//   - A token says nothing about whether its lease is still held. A guard only
//     orders writers; stopping work after a lost lease is the lease's job.
//   - Effects that write performs outside the store its guard protects are not
//     rolled back or fenced.
//   - Tokens from different lease keys (or different lease databases) are not
//     comparable. Use one token source per guarded resource.
package fence
