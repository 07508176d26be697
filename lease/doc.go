// Package lease grants execution ownership of an (account_id, session_id)
// key through a row in PostgreSQL, with a fencing token that strictly
// increases per key.
//
// A Manager (New with a Config) works in one schema migrated with
// migrations.Lease. Acquire grants a *Lease in one statement, on the
// database clock, or returns a *HeldError naming the holder; AcquireWait
// waits for the key; Takeover grants it even while another run holds it
// ("continue here" on another device) and cancels that run with
// ErrTakenOver; Run wraps acquire → work → release; Inspect tells a
// client who owns a key now, so its UI can reconcile with the server;
// List reads many keys and Revoke ends a stuck grant (operator calls).
// Lease.Park leaves a grant in the database between the calls of a run,
// held by no process, and Manager.Resume continues it in any Manager
// (migration 0012). A
// Lease has a run_id (which execution), a fence.Token (which order) and a
// Context that keeps the caller's values, carries the claim (token, run_id
// and Key.Scope, fence.ClaimFromContext) and is cancelled with a cause when
// ownership ends. The Manager renews its leases in the background from New
// until Close: by default with one heartbeat (Config.Renewal,
// RenewalHeartbeat, migration 0009) that keeps every lease it holds with
// one statement per RenewEvery, or lease by lease (RenewalPerLease);
// docs/lease.md explains the design.
//
// # Guaranteed
//
//   - Token order: per key, every later grant carries a larger token than
//     every earlier one, across release and re-acquire.
//   - One holder: a grant succeeds only if the key is free on the database
//     clock (never acquired, released, or expired), judged in the grant's
//     one statement under the row lock. Grants (and releases) of one
//     Manager that queue behind its statements in flight share one
//     statement, which decides each key as its own would (docs/lease.md,
//     "Concurrent grants and releases share a statement"). A row is held
//     while it is not released and either its own expiry (per-lease) or
//     its Manager's heartbeat (heartbeat mode) is in the future; Managers
//     of both modes and of the previous release share a schema safely.
//   - Trust window: a Lease is trusted locally until
//     sent_at + TTL − SafetyMargin on the monotonic clock (sent_at taken
//     before the request left) of its last successful grant or renewal —
//     in heartbeat mode of its Manager's last successful heartbeat, shared
//     by all its leases — which precedes the database's expiry by at
//     least SafetyMargin minus clock-rate drift over one TTL. Its context
//     is cancelled at that deadline unless a renewal moved it, even when no
//     reply ever comes back.
//   - Renew and Release match key and run_id; a renewal also requires a
//     live row, and a heartbeat an unexpired heartbeat (an expired one never
//     comes back: the Manager starts a new one), so a late heartbeat cannot
//     revive a lost lease. Both are safe to retry after a lost reply, and
//     Release reports what the database says (a ReleaseResult) instead of
//     failing.
//   - A run_id argument (Release, Renew, Resume, Revoke) names one run:
//     uuid.Nil is invalid input, refused with ErrInvalidRunID (matching
//     fence.ErrInvalidRun) before anything is sent, never read as "any
//     run". RevokeCurrent is the one call that acts on whichever run holds
//     a key.
//   - Heartbeat mode: a refused heartbeat ends every lease of the Manager
//     (ErrLost); a run a takeover displaced or Revoke revoked ends at the
//     Manager's next heartbeat at the latest (ErrTakenOver, ErrLost), also
//     when notifications are not delivered, and at once when the
//     takeover's notification arrives — also when it arrives while the
//     run's own grant reply is still in flight (the lease then ends as its
//     Acquire or Takeover returns it). A Manager's first grant waits
//     (bounded by CallTimeout) until its listener is listening, so its
//     first leases are told like later ones. The heartbeat statement runs on the
//     Manager's own context, one at a time: Acquire, Renew and the renewer
//     share the one in flight, and a caller whose ctx ends stops waiting
//     without failing the heartbeat. What it reads grows with the
//     Manager's own leases, not with other Managers' takeovers. A release of a run of this
//     Manager that failed (its outcome unknown) is retried by the Manager
//     until one succeeds, the heartbeat ends or Close, so a failed release
//     does not hold a key for the Manager's lifetime; until then the key
//     stays held.
//   - Parked grants (Lease.Park, Manager.Resume): a parked grant keeps its
//     run_id and token, is held (a new grant of the key is refused, by
//     this release and by the previous one) until idle passes on the
//     database clock, and depends on no Manager: its Manager's Close, a
//     lost heartbeat or a dead process do not end it, and no renewal
//     touches it (renewal statements exclude parked rows, so a renewal in
//     flight when the park commits cannot move its expiry). Resume is one
//     statement: exactly one of several concurrent Resumes of a run wins
//     (the others get ErrRunActive), the run keeps its token (no token is
//     drawn), and Resume of a run displaced by a Takeover reports
//     ErrTakenOver. A park whose outcome is unknown ends the Lease anyway;
//     in heartbeat mode the Manager parks the row again in the background
//     (only while it still names its heartbeat), so the key is not held
//     for the Manager's lifetime.
//   - Run releases the lease however fn ends, also when fn panics (the
//     panic then goes on unchanged), unless fn parked it.
//   - Every statement is bounded by CallTimeout (its own timeout, or the
//     caller's sooner deadline), which New keeps below
//     TTL − SafetyMargin − RenewEvery (a stalled renewal returns inside
//     the trust window). The Authorizer runs before
//     any statement: a refused caller consumes no row and no token.
//   - Fail closed on a new database node: after a promotion (a new
//     timeline) or a restore into another database or cluster, every grant
//     is refused with ErrFailoverUnchecked, by the acquire statement itself
//     and for every process, until a token floor check has passed on that
//     node. A Manager configured with a floor source (Config.Floor) runs
//     the check itself when a grant is refused so, and grants in the same
//     call once the check has shown the token sequence above the floor
//     (moving the sequence forward when it was not); without a source the
//     operator runs it (package leaseops). Renewals and releases are not
//     refused.
//   - A statement the database aborted for concurrency (serialization
//     failure, deadlock, lock timeout) returns an error matching ErrBusy
//     and changed nothing; AcquireWait retries it, and also retries a
//     read-only or restarting server and refused grants until its ctx
//     ends.
//   - Every statement works in each pgx QueryExecMode (exec and
//     simple_protocol included, as connection poolers require) and behind
//     PgBouncer in session or transaction pooling.
//   - Notifications are checked, not assumed: the listener sends itself a
//     probe from another session (the pool's settings) after LISTEN and
//     every WaitPoll. When probes do not come back (a pooler in
//     transaction mode), the Manager says so once (Warn log, metric,
//     Health) and polls every FallbackPoll instead; Config.ListenConnString
//     gives it a connection that delivers.
//   - With Config.TracerProvider, each Acquire, AcquireWait, Takeover,
//     Release, Renew, Run, Park and Resume is one span (names, attribute keys and
//     outcomes in package lease/leasetrace; the attributes carry the key's
//     ids, the run id and the token), a child of the span in the
//     call's ctx; a lease's Context carries the caller's span, not the
//     Manager's. A span's status is Error only for failures; a refusal
//     (held, unauthorized, token floor, busy) is an outcome. Without it no
//     span is recorded and the Manager does no span work.
//
// # Not guaranteed
//
//   - Mutual exclusion of effects. A holder that is paused or partitioned
//     may keep running after its context was cancelled: downstream
//     resources must check the token atomically with each write (the
//     guards packages). Effects in flight at loss are not undone.
//   - Tokens never going backwards after a restore or failover to a stale
//     replica, beyond what the token floor (package leaseops) detects.
//   - Fairness: AcquireWait callers race; there is no queue.
//   - Latency behind a pooler in transaction mode without ListenConnString:
//     releases and watch events are then seen within FallbackPoll, and a
//     displaced holder learns within RenewEvery in heartbeat mode
//     (FallbackPoll per-lease), not within milliseconds.
//   - Consecutive tokens: refused attempts consume sequence values too.
//   - Survival of the Manager: when the process dies its leases are not
//     renewed and expire after at most TTL.
//   - Isolation between the leases of one Manager in heartbeat mode: one
//     stuck Manager (paused, partitioned, heartbeat refused) loses all its
//     leases at once. RenewalPerLease renews each lease on its own, at one
//     statement per MaxBatch leases per period.
//   - Per-lease TTLs: every lease of a Manager has its TTL.
//   - Exclusion between the processes that share a parked run: a parked or
//     resumed run keeps its token, so guards accept the writes of every
//     process that holds its claim. Stop the work under a Lease before
//     Park; the previous process's writes still in flight are not fenced
//     off by the Resume.
//   - A per-lease Manager does not park a row again after a park or resume
//     whose outcome is unknown: the row is parked, or an unrenewed row of
//     the run that expires within TTL (Resume says ErrRunActive until then,
//     ErrLost after).
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
//	held (run A) ──Takeover──> held (run B, larger token); A's context ends
//	                           with ErrTakenOver, its Renew and Release are refused
//
//	held (run A, Manager M) ──Lease.Park(idle)──> parked (run A, same token,
//	      ^                                       no Manager, expires after idle)
//	      └───── Manager.Resume(run A), any Manager ────┘ │
//	                                                      │ idle passes
//	parked ──Takeover──> held (run B)                     v
//	parked ──Release(run A) / Revoke──> released/expired  expired ──Acquire──> held
//
// Every grant (Acquire or Takeover, optionally labelled WithHolder) sets a
// new run_id and a larger token. Renew of a released or
// expired lease is refused (ErrLost); Release of an expired one changes
// nothing (ReleaseExpired); Release or Renew by another run_id changes
// nothing (ReleaseNotHolder). Revoke moves a held key to expired at once.
//
// On the holder's side a Lease goes from held to ended exactly once; the
// cause of its context is ErrLost, ErrTrustExpired, ErrTakenOver,
// ErrReleased, ErrParked or ErrClosed. A parked run continues as a new
// Lease (same run_id and token) from Resume.
package lease
