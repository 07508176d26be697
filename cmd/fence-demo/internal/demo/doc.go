// Package demo is the program behind cmd/fence-demo (`make demo`): one
// conversation driven from two devices, against the real PostgreSQL and
// MinIO, showing what fencekit guarantees and how a tool implementation uses
// it.
//
// # What the scenario shows
//
// The desktop client's run A and the browser client's run B act on the same
// session key (account "acme", a fresh session id per run):
//
//  1. Run A passes the lease Authorizer, acquires the session lease (token N)
//     and starts a tool call that writes a report object to MinIO (s3guard)
//     and a row to a PostgreSQL table (pgguard.InTx: the fence and the row in
//     one transaction), both with the claim the lease's context carries.
//  2. Run A reaches both stores through internal/netproxy proxies. The
//     scenario blackholes them, with A's writes already sent: nothing gets
//     through and nothing errors, as in a network stall. A's background
//     renewals get no reply, and its lease context really ends at its local
//     trust deadline (cause lease.ErrTrustExpired). The stall lasts at least
//     1.25 × TTL.
//  3. Run B inspects the session, sees it held but no longer renewed, waits
//     for the expiry the server reported, and acquires (token M > N). Its
//     writes are accepted.
//  4. A plain second Acquire while B holds is refused with a
//     *lease.HeldError naming B; a user of another account is refused by the
//     Authorizer before any statement is sent (the token sequence is
//     unchanged).
//  5. The network heals. A's held requests arrive: both guards refuse them
//     as stale (presented N, highest M). A's late renewal (lease.ErrLost) and
//     late release (lease.ReleaseNotHolder) change nothing.
//  6. Both clients Inspect the session and reconcile their UI with the
//     server's answer; B releases.
//
// A second scene, "continue here while the desktop is still running":
//
//  7. The desktop's run C acquires again (holder label "desktop") and is
//     alive: it renews, nothing stalls. The browser's run D calls
//     lease.Manager.Takeover (holder "browser") and gets token P > C's.
//  8. C's lease context ends with cause lease.ErrTakenOver, told by the
//     takeover's notification, usually before C's next background renewal
//     could have been sent (the event says which could have told it); a
//     check requires it within one renewal period of the takeover, and the
//     time from Takeover returning is printed (Result.TakeoverNotice).
//  9. D writes; C's result, sent with C's claim but not its cancellation,
//     is refused by both guards as stale. C's renewal (lease.ErrLost and
//     lease.ErrTakenOver) and release (lease.ReleaseNotHolder) are refused.
//  10. The end state is checked: the object holds D's write, both marks
//     hold P, the table holds exactly B's and D's rows, the lease was last
//     granted to D and released. Any failed check makes RunScenario return
//     a *CheckError and the program exit 1.
//
// The story (the fencekit calls, in order) is story.go; how each step is
// told is tell.go. Every step is an Event (actor, token, kind, outcome, details), printed as
// a timeline line (TextPrinter, colour only on a terminal and never with
// NO_COLOR), as JSON Lines (JSONPrinter), and drawn by RenderSVG. Tests
// assert outcomes from the events' fields, not their wording.
//
// # Subcommands
//
// acquire, renew, release, inspect and put (see Main) explore a session by
// hand across terminals. serve (serve.go, pages in web/) shows the story in
// two browser tabs that follow the owner through lease/leasehttp. acquire exits without releasing: the lease lasts its
// TTL. The lease package has no call to detach a held lease, so the command
// closes its pool before its Manager, whose release at Close then fails and
// leaves the lease to its TTL.
//
// # Exit codes
//
// ExitOK (0), ExitFailed (1: a check failed or an operation failed),
// ExitUsage (2: bad command line, token, run id or key) and ExitRefused (3:
// held, lost, not the holder, stale, unauthorised); ExitCode maps errors.
//
// # What it does not show or guarantee
//
//   - The stall is a network stall of run A's connections only; the
//     process keeps running, so A's trust timer fires on time. A real GC
//     pause also stops the timer; the guards' refusal does not depend on it.
//   - A's in-flight writes use a context that is not the lease's, standing
//     for requests already on the wire that cancellation cannot recall.
//   - Tokens are strictly increasing, not consecutive: a takeover of an
//     existing key and a refused attempt consume sequence values, so B's
//     token is larger than A's by one or more.
//   - State is kept in the schema "fencekit_demo" and the bucket
//     "fencekit-demo" (configurable); each run uses a fresh session id, so
//     earlier runs' rows and objects stay and do not interfere.
package demo
