// Package guardtest is a conformance kit for fence.Guard implementations and
// for any store that claims to enforce fencing tokens.
//
// A guard's tests wrap it as a [Subject] (a guarded Write of a string value
// and a Read of the current value and the token that wrote it) and call
// [Run]. [FromGuard] builds a Subject from any fence.Guard plus a [Store];
// [NewMapStore] returns an in-memory Store for guards that protect nothing else.
//
// Three further interfaces are required by default: [ClaimWriter] (a write
// presenting a token with a run identity), [ContextWriter] (the guard's
// ctx-first form, taking the claim from ctx) and [StrictWriter] (a write
// through the guard in its strict mode, which refuses resources outside the
// claim's scope). FromGuard provides the first for any guard and the second
// for a [ContextGuard]; [FromGuardStrict] adds the third from a second,
// strict guard. A Subject that does not implement one yet lists it in
// [Config.Pending]: Run then skips only the checks that need it and logs
// which checks it skipped and why.
//
// Four are optional (their checks are skipped, and logged, without them):
// [FailingWriter], [Fencer] (the fence.Guard the writes go through, whose
// Fence the kit calls itself; every guard should offer it), [DuplicateWriter]
// (a write whose first request is held in transit while retries go through,
// delivered after a later write), and [OutcomeWriter], which holds back the store's reply
// to the request that commits a write until the write's context ends.
// Every guard whose commit crosses a network should implement the latter
// (with a TCP proxy such as a test's, an http.RoundTripper, or the server
// itself holding the reply); an in-process guard cannot. The
// linearizability check calls WriteHeld and WriteDelayed from several
// goroutines at once, never for two writes of one resource at a time (a
// delayed write's resource stays taken until its held copy is delivered):
// implementations must be safe for that.
//
//	func TestConformance(t *testing.T) {
//		guardtest.Run(t, guardtest.Config{
//			New: func(t *testing.T) guardtest.Subject {
//				return guardtest.FromGuardStrict(myguard.New(...), myguard.New(strict...), guardtest.NewMapStore())
//			},
//		})
//	}
//
// # What the kit checks
//
// Each check is also exported as a function returning an error (see
// [Checks]), so the kit itself is tested against deliberately broken guards.
//
//   - first write on a fresh resource is accepted, and Read returns it;
//   - a higher token is accepted, an equal one is accepted (retry);
//   - a lower token is refused with an error matching fence.ErrStale whose
//     *fence.StaleError carries the presented and the highest token, and the
//     stored value and token are unchanged;
//   - invalid tokens (0, negative) are refused with errors matching
//     fence.ErrInvalidToken, invalid resource names with errors matching
//     fence.ErrInvalidResource, and neither changes state;
//   - when the Subject implements [FailingWriter], a write whose callback fails
//     does not raise the mark;
//   - a write under a context cancelled with a cause fails with an error
//     matching context.Canceled and the cause, never fence.ErrBusy, and
//     changes neither value nor mark (Write and WriteContext);
//   - WriteContext without a claim in ctx fails with fence.ErrNoToken and
//     writes nothing; under fence.WithClaim it admits and refuses exactly
//     like Write, sharing the marks;
//   - with the mark set by run A at token T, T from run B is refused with a
//     *fence.ReusedError (neither stale nor busy) and changes nothing; T
//     from A, and T with no run, are accepted; a run-less write keeps A's
//     identity; T+1 from B is accepted; a malformed run is refused with
//     fence.ErrInvalidRun and writes nothing;
//   - a write whose context ends while its committing request is in flight,
//     after the store applied it (OutcomeWriter), is never reported as
//     "nothing written": the guard settles it (nil, and Read returns it) or
//     returns an error matching fence.ErrOutcomeUnknown, context.Canceled
//     and the cause; a retry under the same token is then accepted; a write
//     under a context that ended before the call never reports an unknown
//     outcome (nothing can have been sent); these errors name the context's
//     end ("fence: context ended") at most once;
//   - a copy of an earlier write of a run, held in transit while the client
//     or the guard re-sent it (DuplicateWriter), is never applied after a
//     later write of the same run or of a newer one: the later value stays;
//   - in strict mode (StrictWriter), a claim scoped to one key is accepted
//     inside its scope; another key's claim, a claim without a scope, a
//     mere text-prefix scope and the scope itself as a resource are refused
//     with a *fence.ScopeError (neither stale nor busy), changing neither
//     value nor mark; a malformed scope is refused with
//     fence.ErrInvalidScope, strict or not;
//   - through the guard's own Fence ([Fencer]): the write callback's
//     context carries the admitted claim (fence.ClaimFromContext: the token
//     Fence was given, with the run of ctx's claim only when that claim is
//     for the same token; Do's callback sees ctx's claim); and a Fence
//     whose callback writes nothing, on a resource never written, succeeds,
//     raises the mark (a lower token is then stale, the same one accepted)
//     and makes no value appear (Read finds none), in every guard alike;
//   - many concurrent writers with shuffled, interleaved tokens on several
//     resources: from the recorded history of every attempt (invocation and
//     completion order, outcome) the check verifies that no write was
//     accepted whose token is lower than that of a write whose acceptance
//     completed before it was invoked, that every stale refusal names a
//     higher token accepted from an attempt invoked before the refusal
//     completed, that concurrent reads never return a value no accepted
//     write stored, never return an older token than a write or a read that
//     completed before them, and that the final stored value and token are
//     those of the highest accepted token;
//   - linearizability under faults (Checks: LinearizableUnderFaults): many concurrent
//     writers and readers over a few resources, with interleaved tokens, run
//     identities (repeated writes of a run, run-less writes, re-issued
//     tokens), and a fraction of the writes made through WriteHeld (reply
//     held; the check ends the write's context once it was applied) and
//     WriteDelayed (first copy held, delivered at a random later moment
//     while the other writes go on, after a later write of the same run).
//     The history of every write, read and delivery, with its outcome (ok,
//     stale, stale after a lost reply, reused, busy, settled not applied,
//     outcome unknown), must be linearizable, checked with Porcupine, against
//     a fenced register: a write is applied if and only if fence.DecideClaim
//     admits it, never as a copy of an earlier write of its run after a later
//     one, and a read returns the last applied write. Writes whose outcome is
//     unknown, or stale after a lost reply, may or may not have taken effect
//     (until their held copy was answered; for ever when no fault was
//     injected); settled not-applied and busy writes never did; a stale
//     refusal needs a write with a higher token, a reused one a write of its
//     token from another run, that may have been applied and was invoked
//     before the refusal completed. Without OutcomeWriter and
//     DuplicateWriter the faults are skipped, and logged, and the
//     fault-free history is still checked.
//
// # What the kit does not check
//
// The history checks are over real time as observed by the test process;
// they cannot see effects a guard performs outside Write and Read, and a
// passing run is evidence, not proof: an atomicity bug may need many rounds
// to show, and a late copy applied and overwritten before any read saw it
// leaves no trace. Raise [Config.Rounds] and [Config.FaultRounds] (and
// [Config.SearchTimeout], since the search is NP-hard) when hunting one.
// Apart from the held reply of OutcomeWriter and the delayed copy of
// DuplicateWriter, the kit does not test behaviour under store failures
// (crashes, partitions, failover); adapters test those themselves.
package guardtest
