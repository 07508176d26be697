// Package effects records a tool's calls to targets that cannot check a
// fencing token (a payment API, e-mail, a webhook) only while the producer
// still owns its work, and delivers each recorded call through relays.
//
// A producer holding a lease records an [Effect] (target name, the caller's
// request key, the request frozen as bytes) with [Outbox.Record] or, inside
// its own transaction (pgguard's InTx, say), [Outbox.RecordTx], under the
// claim its context carries: a lease's Context() carries it, and a claim
// held elsewhere is passed with fence.WithClaim (there is no other way to
// pass one). The same
// statement checks, as lease.CheckClaimTx does, that the claim is the key's
// current grant and share-locks the lease row: a takeover granted before
// the check makes it fail with an error matching fence.ErrStale, and one
// requested during it is ordered after the commit. Nothing is sent by the
// producer: a [Relay] claims due effects (FOR UPDATE SKIP LOCKED, woken by
// the NOTIFY the insert sends at commit, polling as a fallback) and calls
// the target's [Deliverer]. [Outbox.Await] waits for an effect's outcome.
//
// Config.MeterProvider and Config.TracerProvider receive the Outbox's and
// its Relays' instruments and spans (package effects/effectsobs names
// them; nil records nothing). Final effects stay until [Outbox.DeleteFinal]
// deletes them (retention).
//
// # States
//
//	pending --claim--> (sending, at-most-once targets) --> delivered | rejected | ambiguous
//	pending --retry (backoff)--> pending
//	pending (never claimed) --CancelDisplaced / Cancel--> canceled
//
// # What is guaranteed
//
//   - An effect is recorded only in a transaction in which its claim was
//     the current, live grant of its lease key, and that transaction held
//     the key's row lock until it committed. A run displaced by a takeover
//     (or whose lease expired or was released) records nothing.
//   - Every delivery of an effect sends the bytes recorded, unchanged, and
//     the same idempotency key ([IdempotencyKey], derived from the effect
//     id alone), whichever relay sends it and however often.
//   - Each claim raises the effect's epoch; an outcome is written only
//     under the epoch of its claim. A relay that stalled past its claim
//     (ClaimFor) writes nothing once another relay has claimed the effect.
//   - The same (lease key, request key) yields one effect id; the same
//     request key with another target or request is a *[ConflictError].
//   - Final states are final: delivered, rejected (the target said no),
//     ambiguous (see below), canceled (never sent). Only an operator's
//     [Outbox.Retry] reopens an ambiguous or rejected effect.
//   - [Outbox.CancelDisplaced], by the key's new holder, cancels effects of
//     earlier grants that no relay has claimed; none of them is ever sent.
//
// # What is not guaranteed
//
//   - "Once" at an idempotent target is bounded by the target's own
//     deduplication: a redelivery carries the same key, and the target must
//     keep it. Past the target's window ([Target].DedupWindow) an effect whose
//     outcome is unknown ends ambiguous instead of being sent again.
//   - At-most-once targets (SMTP, [Target].AtMostOnce) never receive an
//     effect twice from fencekit, but a send interrupted by a crash or a
//     stall ends ambiguous: it may or may not have happened.
//   - A relay paused in the middle of a send may still complete that send
//     after another relay took the effect over; only its outcome write is
//     refused. For an idempotent target both sends carry the same key.
//   - Effects recorded while the producer held the lease are delivered by
//     default even after the producer lost it (the policy is the new
//     holder's: CancelDisplaced).
//   - Record holds the lease row's share lock until its transaction ends:
//     the holder's own per-lease renewal and release of that key wait for
//     it. Keep the transaction short.
//   - The effects table must be in the lease database (one transaction).
//     Notifications need a direct or session-pooled connection
//     (RelayConfig.ListenConnString behind a transaction pooler); without
//     them relays find effects by polling.
package effects
