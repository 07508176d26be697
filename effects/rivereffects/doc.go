// Package rivereffects connects package effects to river
// (github.com/riverqueue/river), for applications that already run river
// workers: recording an effect also inserts, in the same transaction
// (river's InsertTx), a river job that carries only the effect's id, and a
// river worker delivers the effect through an effects.Relay's
// DeliverEffect, under the outbox's claim/epoch protocol, with the same
// Deliverer and idempotency key as any relay.
//
// It is a nested module so that fencekit's own module does not depend on
// river: package effects needs no river.
//
// # What is guaranteed
//
//   - The job is inserted in the transaction that records the effect,
//     after the lease check: a producer whose claim is not current (a
//     takeover, an expiry, a release) records nothing and inserts no job;
//     the transaction is rolled back. An effect and its job commit
//     together or not at all.
//   - The effect row is the source of truth, the job only a wake-up. A
//     worker claims the effect like a relay (FOR UPDATE SKIP LOCKED, the
//     epoch raised, at-most-once targets set sending before the send) and
//     writes the outcome only under its claim's epoch, so river workers
//     and effects relays on the same schema deliver each effect as any set
//     of relays would: every send carries the recorded bytes and
//     effects.IdempotencyKey(id). A job for an effect that is final,
//     missing or deleted completes without sending anything.
//   - A job for an effect that is not final after the attempt snoozes
//     until the effect is due again (its retry backoff, at least
//     WorkerConfig.MinSnooze), or for MinSnooze while another relay's live
//     claim holds it, and completes once the effect is final.
//
// # What is not guaranteed
//
//   - That a job exists for every effect: effects recorded through
//     effects.Outbox directly have none, and a job deleted or discarded in
//     river leaves its effect pending. Run an effects.Relay (it polls) on
//     the schema as well when that matters; it delivers what no job did.
//   - River's own guarantees are river's: a job may run more than once
//     (rescue of a stuck job); the effect's claim makes a second run
//     harmless, not absent.
//   - The worker's Relay must serve every target recorded through the
//     Recorder: a job for a target it does not serve snoozes until another
//     relay delivers the effect.
package rivereffects
