// Package mcpfence fences the tool calls of a Model Context Protocol server
// (the official Go SDK, github.com/modelcontextprotocol/go-sdk) with
// fencekit leases: a side-effecting tool runs only while its call holds the
// lease of its conversation, and its handler's ctx carries the lease's claim,
// so every fencekit guard works inside the tool unchanged.
//
// A Fence (New with a Config) is installed as receiving middleware:
//
//	f, err := mcpfence.New(mcpfence.Config{
//		Manager: manager,                                  // a *lease.Manager
//		Account: mcpfence.FromMeta(mcpfence.MetaAccount),  // or from the server's auth
//		Authorize: isMember,                               // the membership check
//		Tools: map[string]mcpfence.Policy{"read": mcpfence.Unfenced, "write": mcpfence.ContinueHere},
//	})
//	server.AddReceivingMiddleware(f.Middleware)
//
// For each tools/call of a fenced tool the Fence, in this order: finds the
// conversation (Config.Conversation: the _meta key MetaConversation by
// default, or an HTTP header, or a function of the MCP session) and the
// account (Config.Account); runs Config.Authorize; obtains the lease of
// lease.Key{AccountID: account, SessionID: conversation} by the tool's Policy
// (Acquire, Wait, ContinueHere), or continues the call's run (MetaRun);
// calls the tool with a ctx that has the request's values and cancellation,
// the lease's claim (fence.ClaimFromContext) and ends, with the lease's
// cause, when the lease ends; releases a per-call lease when the tool
// returns, and parks a run's lease in the database when the run's last
// call running here returns (with Config.RunCache, a later call of a run
// this Fence parked runs without either: see The run cache). A tool that neither Config.Tools nor
// Config.Default gives a policy is refused (CauseUnknownTool).
//
// # Runs
//
// A lease spans one call, or a run of calls. A call that presents
// MetaRunStart obtains the lease by its tool's Policy and its result names
// the run's handle (LeaseInfo.Run under MetaLease: the lease's run_id, a
// UUID). Later calls present the handle as MetaRun and run under the same
// lease (one token), on any replica: between calls the run lives in the
// database as a parked grant (lease.Lease.Park, for Config.RunIdle), and a
// later call resumes it (lease.Manager.Resume), waiting with backoff (5 ms
// to 100 ms, at most Config.MaxWait) while a call of the run runs on
// another replica. The handle is checked against the lease's row: it
// continues the run only for the account and conversation the run holds,
// whatever MCP session or transport the call came by, and it is no
// credential (Authorize runs for every call). Only the first call's Policy
// is used. A run ends at MetaRunEnd (on any replica), when no call came
// for Config.RunIdle (its parked grant expires), when another device takes
// the conversation over, and when its first call did not succeed (released
// at once); a call of an ended run is refused with CauseRunEnded (or
// CauseTakenOver).
//
// # The run cache
//
// With Config.RunCache a later call of a run on the replica that served
// its previous call sends no lease statement. When a call of a run parks
// it, the Fence keeps the run (key, handle, token, holder) and trusts the
// park until sent_at + RunIdle − RunIdle/5 (sent_at: the local time just
// before the park statement was sent; the parked expiry is set on the
// database clock after it, and the margin of RunIdle/5, as the lease
// package's default SafetyMargin is TTL/5, absorbs clock-rate differences
// and scheduling delay), and it watches the conversation
// (lease.Manager.Watch). A later call with the handle, for the same
// conversation, while the entry is trusted, runs its tool at once under
// the run's claim; its ctx ends when the watch reports that the run no
// longer holds the conversation (taken over: a cause matching
// lease.ErrTakenOver; released, expired, another grant: lease.ErrLost) or
// when the entry's trust deadline passed without an extension
// (lease.ErrTrustExpired). Its result's LeaseInfo is the same as through
// Resume. A call with MetaRunEnd, a call naming a request id
// (MetaRequest), a call whose holder label differs from the run's, and any
// call past the trust deadline or after the entry was dropped take the
// Resume path (which caches the run again when it parks it). The entry is
// dropped at once when a call through this Fence ends the run (run_end, a
// takeover or another grant of the conversation, a Resume that finds the
// run ended), when the watch reports the run's end or fails, and when the
// trust deadline passes; Close stops every entry's watcher and clock.
//
// The cache keeps the idle clock: after cached calls, the run's parked
// expiry is pushed forward in the background, off every call's path
// (Resume, then Park for RunIdle, at most once per RunIdle/10 while calls
// ran or run since the last park, each bounded by ReleaseTimeout; skipped
// while another replica has the run active, as that replica parks it
// itself), and the trust deadline moves with each such park. So a run
// still ends when no call came for RunIdle, on any replica: between
// RunIdle and about 1.1×RunIdle after its last call.
//
// The trade-off: a cached call is checked against the lease row through
// the watch (its notifications, and its safety-net poll, lease's
// DefaultWatchPoll, 1s, for changes that notify nothing), as a held lease
// is, not by a statement of its own. After another replica ended the run
// (run_end) or another device took the conversation over, a call of the
// run on a replica that has not yet heard of it may still run, for up to
// that delay; after a takeover the new run's token is larger, so its
// guarded writes are refused (stale) once the new holder wrote. Calls of
// one run on two replicas may then overlap (both under the run's token).
// Without RunCache every later call is checked by its Resume statement.
//
// # Duplicate calls
//
// A call may name its own request id, MetaRequest: the client's id for one
// logical call, sent again when it re-issues the call (after a broken
// stream, say). The Fence keeps, in the lease database (Config.Requests,
// migration set mcp), one row per account, conversation and request id:
// the SHA-256 of the tool's name and arguments, the run and token of the
// call that claimed it, and its result once it returned. The first call
// claims the row after its grant, in one transaction that checks and
// share-locks its lease row (lease.CheckClaimTx), so a row is claimed only
// by a call that holds the conversation; the result is kept before the
// lease is released or parked. A later call with the same id, on any
// replica or after a restart, runs nothing: it gets the kept result (the
// same JSON), or waits for it while the claiming call still holds the
// lease (for at most Config.MaxWait, then CauseRequestRunning); with
// another tool or other arguments it is refused with CauseRequestConflict.
// When the claiming call kept no result and no longer holds the lease (it
// was displaced while its handler ignored its ctx, its process ended, its
// handler returned a protocol error, its result was larger than
// MaxRequestResult) a duplicate is refused with CauseRequestUnknown: the
// first call may have written, and nothing runs again. Rows are kept for
// at least Config.RequestRetention; a duplicate that comes later runs as a
// new call.
//
// # What the client sees
//
// A refused or stopped call is never a transport error: it is a tool result
// with isError set, a text content for models and people, and structured
// content, a Refusal, naming the cause (CauseTakenOver, CauseStale,
// CauseHeld, CauseOutcomeUnknown, CauseLost, CauseRunEnded,
// CauseRequestConflict, CauseRequestRunning, CauseRequestUnknown,
// CauseUnauthorized, CauseNoKey, CauseInvalidMeta, CauseCanceled,
// CauseUnavailable), the call's token and, when known, the conversation's
// Owner (holder label, token, run id, whether it still holds). A successful
// fenced call's result carries a LeaseInfo in its _meta under MetaLease.
// RefusalFrom decodes a Refusal on the client side. The Middleware's
// tools/list result advertises each fenced tool's output schema as "the
// tool's schema or a Refusal" (anyOf), so that clients that validate an
// error result's structured content (the TypeScript SDK does) accept
// refusals; the server's own tools are not changed.
//
// # Guaranteed
//
//   - Nothing of a fenced tool runs without the lease: the handler is
//     called only after the grant, and its ctx ends when the lease ends
//     (taken over, lost, trust deadline passed, released).
//   - Authorize before competing: a call without a key (the refusal names
//     where the missing part was looked for), with malformed _meta (wrong
//     JSON type, empty, longer than lease.MaxIDLen or MaxRunIDLen, invalid
//     UTF-8, a control character, or U+FFFD, which JSON decoding leaves in
//     place of invalid bytes and lone surrogates, so that two ids a client
//     sent can never become one), whose names fail (the lease key, the
//     claim's scope, Config.CheckKey: the server's guard resources), or
//     refused by Config.Authorize sends no lease statement and runs
//     nothing.
//   - Over Fence.HTTPHandler (both revisions from one endpoint: 2026-07-28
//     stateless, 2025-11-25 with sessions), a call whose client is gone —
//     its HTTP request ended before the result (dropped connection, the
//     client's own timeout), or its MCP session closed (DELETE) — ends
//     with ErrClientGone: a waiting call stops waiting, the tool's ctx
//     ends, a call granted after its client left never runs its tool, and
//     a per-call lease is released as the handler returns.
//   - The claim in the handler's ctx is the lease's (token, run id, key's
//     scope): guards refuse the writes of a displaced run once the new
//     holder has written, and the Refusal says so (CauseStale, with both
//     tokens).
//   - A per-call lease is released when the handler returns, however it
//     returns, also when the call was cancelled (notifications/cancelled
//     cancels the handler's ctx): the release runs on a context of its own
//     bounded by Config.ReleaseTimeout. A release that fails is retried by
//     the Manager (lease package). The call's result does not wait for the
//     release's commit (unless Config.ReleaseBeforeReply): a later Acquire
//     or Wait call of the same conversation through this Fence waits for it
//     before its own acquire, and Close waits for every release in flight.
//   - A Wait call sends a progress notification (naming the holder) at once
//     and every Config.ProgressEvery while it waits, when the client asked
//     for progress; it waits at most Config.MaxWait.
//   - A call that names a request id whose row exists runs nothing and
//     sends no lease statement but Inspect: it replays, waits, or is
//     refused (see Duplicate calls). A call that obtained the lease runs
//     its tool only after its claim of the id committed.
//   - With Config.TracerProvider each fenced call is one SpanToolCall; the
//     lease's spans and the guards' spans of the tool's writes are its
//     children (the lease's and guards' metrics are theirs, unchanged).
//
// # Not guaranteed
//
//   - Mutual exclusion of effects outside guards: a displaced tool whose
//     handler ignores its ctx keeps running; only guarded writes are
//     refused (see the lease package).
//   - That the client sees a cancelled call's result: MCP drops it.
//   - A run's handle is not a secret and not bound to a session: anyone
//     the server authorizes for the conversation may continue the run.
//   - That a run's calls never run at once: calls of one run on one replica
//     share its lease and may overlap (the run's token covers them all), as
//     they did before runs moved between replicas; calls of one run on two
//     replicas do not overlap (the second waits for the park), unless
//     Config.RunCache is set (a cached call does not wait).
//   - With Config.RunCache, that a cached call learns of its run's end
//     (run_end or a takeover on another replica) before it runs: the watch
//     tells it within its notification's delay, or its poll's (1s).
//   - A duplicate that arrives before its first call claimed the id (the
//     two are sent at once) is a competing call: under Acquire or Wait it
//     may be refused with CauseHeld (or wait, and then replay); under
//     ContinueHere it takes the conversation over and the first call,
//     displaced before its claim, runs nothing (CauseLost). Either way the
//     tool runs at most once per request id.
//   - The Owner named in a Refusal is the database's answer when the
//     refusal was built; it may have changed since.
//   - That a conversation is free the moment a per-call result arrived,
//     for a call through another Fence (another server replica): the
//     release may still be in flight for its round trip, and such a call
//     finds the conversation held until then (Config.ReleaseBeforeReply
//     makes the result wait for the release).
package mcpfence
