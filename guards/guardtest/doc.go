// Package guardtest is a conformance kit for fence.Guard implementations and
// for any store that claims to enforce fencing tokens.
//
// A guard's tests wrap it as a [Subject] (a guarded Write of a string value
// and a Read of the current value and the token that wrote it) and call
// [Run]. [FromGuard] builds a Subject from any fence.Guard plus a [Store];
// [MapStore] is an in-memory Store for guards that protect nothing else.
//
//	func TestConformance(t *testing.T) {
//		guardtest.Run(t, guardtest.Config{
//			New: func(t *testing.T) guardtest.Subject {
//				return guardtest.FromGuard(myguard.New(...), guardtest.NewMapStore())
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
//   - many concurrent writers with shuffled, interleaved tokens on several
//     resources: from the recorded history of every attempt (invocation and
//     completion order, outcome) [CheckHistory] verifies that no write was
//     accepted whose token is lower than that of a write whose acceptance
//     completed before it was invoked, that every stale refusal names a
//     higher token accepted from an attempt invoked before the refusal
//     completed, that concurrent reads never return a value no accepted
//     write stored, never return an older token than a write or a read that
//     completed before them, and that the final stored value and token are
//     those of the highest accepted token.
//
// # What the kit does not check
//
// The history check is over real time as observed by the test process; it
// cannot see effects a guard performs outside Write and Read, and a passing
// run is evidence, not proof: an atomicity bug may need many rounds to show.
// Raise [Config.Rounds] when hunting one. The kit does not test behaviour
// under store failures (lost replies, crashes); adapters test those
// themselves.
package guardtest
