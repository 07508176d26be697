// Package lease grants execution ownership of a (account_id, session_id)
// key through a row in PostgreSQL, with a fencing token that strictly
// increases per key.
//
// # Overview
//
// A Manager (New with a Config) acquires leases in one schema migrated with
// migrations.Lease. Acquire is one conditional UPSERT, in one round trip, on the
// database clock (clock_timestamp(), sampled once per statement). A grant
// returns a *Lease: a fresh run_id (a UUID that distinguishes executions),
// a fence.Token (a number that orders them) and a Context that is cancelled
// when ownership is lost. That Context keeps the values of the ctx given to
// Acquire (not its cancellation) and carries the claim (token and run_id,
// fence.ClaimFromContext); Run's fn gets a child of the caller's ctx that
// is also cancelled on loss. A held key returns a *HeldError naming the
// holder's run_id, token and expiry. Renew and Release match key and
// run_id; renewal also requires an unexpired lease. One background
// goroutine per Manager renews every lease it holds in batched statements.
// Run wraps acquire → work → release; AcquireWait blocks until the key is
// free, woken by LISTEN/NOTIFY on release (a release notifies only keys a
// waiter has flagged contended, migration 0003, and wakes one waiter per
// Manager); Inspect tells clients who owns a key now so that their UI can
// reconcile with the server.
//
// # Token order
//
// Per key, every later grant carries a larger token than every earlier one,
// across release and re-acquire. The token is drawn from a sequence
// (NO CYCLE, CACHE 1) inside ON CONFLICT DO UPDATE SET — under the row
// lock — so a statement that stalled after drawing a value cannot finish
// with a value smaller than a grant committed while it waited. Release
// keeps the row (released_at and expires_at set to the database's now)
// instead of deleting it, so the insert path, whose value is drawn before
// any lock, is taken only by a key's very first grant. Tokens of one key
// are not consecutive: every acquire attempt, including a refused one,
// consumes sequence values.
//
// # Safety model and the trust window
//
// The database decides ownership: a grant or renewal sets
// expires_at = db_now + TTL. The holder trusts its lease locally until
//
//	trust_deadline = sent_at + TTL − SafetyMargin
//
// on the monotonic clock, where sent_at is time.Now() taken before the
// acquire or renew request is sent. Since the database's now for that
// statement is no earlier than sent_at, the local deadline precedes the
// database expiry by at least SafetyMargin, minus the drift between the two
// clocks' rates over one TTL. Deadlines are never computed from database
// timestamps or wall-clock readings. A per-lease timer cancels the lease's
// context at the trust deadline (cause ErrTrustExpired) even when the
// database is unreachable and no reply ever arrives; a renewal the database
// refuses cancels it at once (cause ErrLost); Release gives ErrReleased and
// Manager.Close ErrClosed (context.Cause tells which).
//
// Every statement runs under context.WithTimeout(ctx, CallTimeout), so a
// locked row or a dead connection cannot hold a caller longer than that
// (pgx cancels the query when the context ends). Also set a server-side
// bound for the role the pool uses, as a second line that works even when
// a client dies mid-statement, e.g.
//
//	ALTER ROLE app SET statement_timeout = '5s';
//	ALTER ROLE app SET lock_timeout = '2s';
//	ALTER ROLE app SET idle_in_transaction_session_timeout = '30s';
//
// Renew and release are safe to retry after a lost reply: a renew that
// committed succeeds again while the run still holds the lease, and a
// release reports AlreadyReleased. Release never fails because the run no
// longer holds the lease; the ReleaseResult (Released, AlreadyReleased,
// Expired, NotHolder, NotFound) reports what the database says.
//
// If an Acquire's reply is lost, the Manager releases that run_id in the
// background (bounded by CallTimeout); failing that, the row expires by TTL.
//
// # What a lease does NOT guarantee
//
//   - Mutual exclusion of effects. A holder that is paused (GC, swap, a
//     stopped VM) or partitioned may keep running after its context was
//     cancelled or, if its clock misbehaves, after the database expired its
//     lease. Downstream resources must check the token atomically with each
//     write (see the guards packages). The context only makes a correct
//     holder stop starting new work in time.
//   - Effects already in flight when the lease is lost are not undone.
//     Check Lease.Remaining before starting work that cannot be fenced, and
//     use idempotency keys for it.
//   - Tokens never going backwards after a database restore or failover to
//     a stale replica, unless the floor is checked: the sequence can be
//     behind tokens the guards accepted. CheckTokenFloor (see "Token floor")
//     detects it and makes the database refuse such grants, but only as
//     well as its FloorSource knows the highest token; a restore that also
//     rolled back the guards' marks and the operator's floor is not
//     detectable. Promptness of takeover is bounded by TTL.
//   - Per-key token order after the Janitor deleted a row, if some acquire
//     statement ran longer than JanitorConfig.StatementBound (set
//     statement_timeout for the role).
//   - Fairness: AcquireWait callers race; there is no queue.
//   - Survival of the Manager: when the process dies its leases are simply
//     not renewed and expire after at most TTL.
//
// # Token floor (restore and failover)
//
// Migration 0002 of migrations.Lease adds fencekit_token_floor (one row) and a
// trigger that refuses, with SQLSTATE FK001, any fencekit_leases row whose
// new token is not above the floor; Acquire maps it to a *TokenFloorError
// (ErrTokenFloor), writes no row, and the sequence value is consumed. The
// BEFORE INSERT trigger also sees the token drawn for the insert path, so
// with a stale sequence even an Acquire of a held key reports
// ErrTokenFloor rather than ErrHeld. CheckTokenFloor raises the stored
// floor to Config.TokenFloor (e.g. MaxFloor(GuardMarks.Floor(),
// StaticFloor(n))) and reports whether the sequence is behind;
// AdvanceTokenSequence moves it forward under LOCK TABLE fencekit_leases IN
// EXCLUSIVE MODE, never backwards. See docs/operations.md for the procedure.
//
// # Observability
//
// Logs go to Config.Logger (nil: discarded): Debug only on the happy path,
// Warn when a lease is lost, a renewal statement fails, the listener drops,
// or a grant is refused by the token floor. Metrics go to
// Config.MeterProvider (OpenTelemetry metric API; nil: no-op); the Metric*
// constants name them, and no attribute carries a key, run_id or token.
// Held lists this process's leases with their remaining trust, and
// StatusHandler serves that as JSON.
//
// # Housekeeping
//
// Janitor deletes rows released or expired longer ago than a retention
// that must be at least RetentionFactor × StatementBound and MinRetention,
// in batches (FOR UPDATE SKIP LOCKED); see Janitor for the token-order
// argument. GuardMarks reads the PostgreSQL guard's marks (a FloorSource)
// and deletes marks of resources that are gone — a hazard for resources
// that still exist.
//
// # Several databases
//
// Router sends each key, by AccountID, to one Manager per database.
// Tokens are then per partition: they still order every key's grants,
// since a key lives in one partition, but tokens of different partitions
// are unrelated, so a guarded resource must be written under leases of one
// partition only.
//
// # States of a key
//
//	                Acquire              Renew (same run_id, before expires_at)
//	(not found) ──────────┐                 ┌──────┐
//	                      v                 v      │
//	(released) ──Acquire──> held (run_id, token) ──┘
//	     ^                  │        │
//	     └──── Release ─────┘        │ expires_at passes, no renewal
//	        (same run_id)            v
//	                              expired ──Acquire──> held
//
// Every Acquire sets a new run_id and a larger token. Renew of a released
// or expired lease is refused (ErrLost); Release of an expired one changes
// nothing (Expired); Release or Renew by another run_id changes nothing.
//
// On the holder's side, a Lease goes from held to ended exactly once; the
// context cause is ErrLost, ErrTrustExpired, ErrReleased or ErrClosed.
//
// # Concurrency and resources
//
// One renewer goroutine per Manager ticks every RenewEvery/4 and renews due
// leases in statements of at most MaxBatch leases (UPDATE … FROM unnest(…)),
// so many leases need few statements. AcquireWait starts one LISTEN
// connection per Manager, taken out of the pool, on first use. Close stops
// both, cancels every held lease and releases them under a fresh context.
package lease
