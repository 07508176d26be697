package demo

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/s3guard"
	"github.com/fencekit/fencekit/lease"
)

// This file tells the story of story.go: each method turns the outcome of
// one fencekit call into events (and, where the scenario asserts something,
// a check). Nothing here calls fencekit.

// teller records the scenario's events and checks.
type teller struct {
	s      *scenario
	rec    *Recorder
	checks []Check
}

func (t *teller) emit(e Event) Event { return t.rec.Emit(e) }

func (t *teller) check(name string, ok bool, format string, args ...any) {
	c := Check{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)}
	t.checks = append(t.checks, c)
	out := OK
	if !ok {
		out = Failed
	}
	t.emit(Event{Actor: ActorCheck, Kind: KindCheck, Outcome: out, Resource: name, Detail: name + ": " + c.Detail})
}

func (t *teller) opening() {
	s := t.s
	t.emit(Event{Actor: ActorDemo, Kind: KindInfo, Outcome: Note, Detail: fmt.Sprintf(
		"desktop and browser open conversation %s (TTL %v); run A reaches PostgreSQL via %s and MinIO via %s (fault proxies)",
		s.key, s.cfg.TTL, s.pgProxy.Addr(), s.s3Proxy.Addr())})
}

func (t *teller) acquired(d *device, l *lease.Lease) {
	s, ta, run := t.s, int64(l.Token()), l.RunID().String()
	t.emit(Event{Actor: d.actor, Kind: KindAcquire, Outcome: OK, Token: ta, RunID: run,
		Until:  t.rec.Since(l.TrustDeadline()),
		Detail: fmt.Sprintf("lease granted to run %s, trusted for %v (TTL − safety margin)%s", short(l.RunID()), d.mgr.TrustWindow(), holderSuffix(l.Holder()))})
	t.emit(Event{Actor: d.actor, Kind: KindWork, Outcome: Note, Token: ta, RunID: run,
		Detail: fmt.Sprintf("tool call write_report starts: s3://%s/%s and a row in %s", s.bucket, s.report.object, s.report.table)})
}

func (t *teller) renewed(d *device, l *lease.Lease) {
	t.emit(Event{Actor: d.actor, Kind: KindRenew, Outcome: OK, Token: int64(l.Token()), RunID: l.RunID().String(),
		Until: t.rec.Since(l.TrustDeadline()), Detail: "heartbeat: trust deadline moved forward (the background renewer keeps doing this)"})
}

func (t *teller) stalled() {
	t.emit(Event{Actor: ActorNet, Kind: KindStall, Outcome: Note,
		Detail: "desktop ⇄ PostgreSQL and MinIO blackholed (a network stall / long GC pause): nothing gets through, nothing errors"})
}

func (t *teller) sending(l *lease.Lease) {
	s, ta, run := t.s, int64(l.Token()), l.RunID().String()
	t.emit(Event{Actor: ActorA, Kind: KindWriteSent, Outcome: Pending, Token: ta, RunID: run, Store: "s3", Resource: s.report.object,
		Detail: "sends its report to MinIO through s3guard (no reply yet)"})
	t.emit(Event{Actor: ActorA, Kind: KindWriteSent, Outcome: Pending, Token: ta, RunID: run, Store: "pg", Resource: s.report.resource,
		Detail: "sends its row to PostgreSQL: BEGIN; FenceTx; INSERT; COMMIT (no reply yet)"})
}

func (t *teller) leaseEnded(l *lease.Lease, cause error) {
	e := t.emit(Event{Actor: ActorA, Kind: KindLeaseEnd, Outcome: Lost, Token: int64(l.Token()), RunID: l.RunID().String(), Cause: cause.Error(),
		Until:  t.rec.Since(l.TrustDeadline()),
		Detail: fmt.Sprintf("lease context cancelled: %v (the tool call is told to stop; its writes are already on the wire)", cause)})
	t.check("A's context ended by its trust deadline", errors.Is(cause, lease.ErrTrustExpired) && e.At >= e.Until,
		"cause %q at %+.3fs, trust deadline %+.3fs", cause, e.At.Seconds(), e.Until.Seconds())
}

func (t *teller) inspected(st lease.Ownership) {
	e := Event{Actor: ActorB, Kind: KindInspect, Outcome: Note, Token: int64(st.Token), RunID: st.RunID.String(), Status: st.State.String()}
	if st.Held() {
		e.Until = t.rec.Since(time.Now().Add(st.Remaining))
		e.Detail = fmt.Sprintf("server: held by run %s for %v more on the database clock, but no longer renewed", short(st.RunID), st.Remaining.Round(time.Millisecond))
	} else {
		e.Detail = fmt.Sprintf("server: %s (last run %s)", st.State, short(st.RunID))
	}
	t.emit(e)
}

func (t *teller) expired(st lease.Ownership) {
	t.emit(Event{Actor: ActorB, Kind: KindInspect, Outcome: Note, Token: int64(st.Token), RunID: st.RunID.String(), Status: st.State.String(),
		Detail: fmt.Sprintf("server: %s (run %s stopped renewing) → the browser offers to continue here", st.State, short(st.RunID))})
}

func (t *teller) tookOver(la, lb *lease.Lease) {
	ta, tb := la.Token(), lb.Token()
	t.emit(Event{Actor: ActorB, Kind: KindAcquire, Outcome: OK, Token: int64(tb), RunID: lb.RunID().String(),
		Until:  t.rec.Since(lb.TrustDeadline()),
		Detail: fmt.Sprintf("took over as run %s (token %d > %d)", short(lb.RunID()), tb, ta)})
	t.check("B's token is larger than A's", tb > ta, "A %d, B %d", ta, tb)
}

// wrote emits a write's answer and returns the stored event.
func (t *teller) wrote(e Event) Event { return t.emit(e) }

func (t *teller) wroteB(s3, pg Event) {
	t.check("B's writes were accepted", s3.Outcome == OK && pg.Outcome == OK, "s3 %s, pg %s", s3.Outcome, pg.Outcome)
}

func (t *teller) wroteD(s3, pg Event) {
	t.check("D's writes were accepted", s3.Outcome == OK && pg.Outcome == OK, "s3 %s, pg %s", s3.Outcome, pg.Outcome)
}

// s3Write describes the answer of d's object write (not yet emitted: A's
// answers are emitted when they come back).
func (t *teller) s3Write(d *device, c fence.Claim, info s3guard.Info, err error) Event {
	s := t.s
	e := Event{Actor: d.actor, Kind: KindWrite, Token: int64(c.Token), RunID: c.Run, Store: "s3", Resource: s.report.object}
	if err != nil {
		return writeErr(e, err)
	}
	e.Outcome = OK
	e.Detail = fmt.Sprintf("s3guard accepted s3://%s/%s (mark now %d)", s.bucket, s.report.object, info.Token)
	return e
}

// pgWrite describes the answer of d's row write.
func (t *teller) pgWrite(d *device, c fence.Claim, err error) Event {
	e := Event{Actor: d.actor, Kind: KindWrite, Token: int64(c.Token), RunID: c.Run, Store: "pg", Resource: t.s.report.resource}
	if err != nil {
		return writeErr(e, err)
	}
	e.Outcome = OK
	e.Detail = fmt.Sprintf("pgguard accepted %q: row inserted and mark raised in one transaction", e.Resource)
	return e
}

func writeErr(e Event, err error) Event {
	e.Cause = err.Error()
	if se, ok := fence.IsStale(err); ok {
		e.Outcome, e.Presented, e.Highest = Stale, int64(se.Presented), int64(se.Highest)
		e.Detail = fmt.Sprintf("%s guard refused %q: stale token %d, resource has accepted %d; nothing written", e.Store, e.Resource, se.Presented, se.Highest)
		return e
	}
	e.Outcome = Failed
	e.Detail = fmt.Sprintf("%s write failed: %v", e.Store, err)
	return e
}

func (t *teller) refusedHeld(held *lease.HeldError, err error, lb *lease.Lease) {
	t.emit(Event{Actor: ActorRetry, Kind: KindAcquire, Outcome: Held, Token: int64(held.Token), RunID: held.RunID.String(), Cause: err.Error(),
		Detail: fmt.Sprintf("Acquire refused (ErrHeld): run %s holds token %d for %v more", short(held.RunID), held.Token, held.Remaining.Round(time.Millisecond))})
	t.check("a second acquisition while B holds is refused with B as holder",
		held.RunID == lb.RunID() && held.Token == lb.Token(), "%s", errText(err))
}

func (t *teller) notHeld(err error) {
	t.emit(Event{Actor: ActorRetry, Kind: KindAcquire, Outcome: Failed, Cause: fmt.Sprint(err), Detail: fmt.Sprintf("expected ErrHeld, got %v", err)})
	t.check("a second acquisition while B holds is refused with B as holder", false, "%s", errText(err))
}

func (t *teller) refusedOutsider(err error, before, after int64) {
	var nm *NotMemberError
	ok := errors.As(err, &nm)
	out := Unauthorized
	if !ok {
		out = Failed
	}
	t.emit(Event{Actor: ActorIntrude, Kind: KindAcquire, Outcome: out, Cause: fmt.Sprint(err),
		Detail: fmt.Sprintf("Acquire refused (ErrUnauthorized); token sequence %d before, %d after: no token drawn, no row touched", before, after)})
	t.check("the unauthorised client drew no token", ok && before == after, "%s; sequence %d → %d", errText(err), before, after)
}

func (t *teller) notRefused(err error) {
	t.emit(Event{Actor: ActorIntrude, Kind: KindAcquire, Outcome: Failed, Cause: fmt.Sprint(err),
		Detail: fmt.Sprintf("expected ErrUnauthorized, got %v", err)})
	t.check("the unauthorised client drew no token", false, "%s", errText(err))
}

// stillInFlight checks that none of A's writes came back during the stall.
func (t *teller) stillInFlight(f *inflight) {
	if e, ok := f.early(); ok {
		what := map[string]string{"s3": "the S3 write", "pg": "the PostgreSQL write"}[e.Store]
		t.check("A's writes were still in flight during the stall", false, "%s returned early: %s", what, e.Outcome)
	}
}

func (t *teller) healed(stall time.Time) Event {
	return t.emit(Event{Actor: ActorNet, Kind: KindHeal, Outcome: Note,
		Detail: fmt.Sprintf("network restored after a %v stall (TTL %v): A's held bytes are delivered", time.Since(stall).Round(time.Millisecond), t.s.cfg.TTL)})
}

func (t *teller) lateWriteRefused(e Event, la, lb *lease.Lease, heal Event) {
	t.check("A's late "+e.Store+" write was refused as stale",
		e.Outcome == Stale && e.Presented == int64(la.Token()) && e.Highest == int64(lb.Token()) && e.At > heal.At,
		"outcome %s, presented %d, highest %d, answered at %+.3fs (heal %+.3fs)", e.Outcome, e.Presented, e.Highest, e.At.Seconds(), heal.At.Seconds())
}

func (t *teller) lateRenewRelease(l *lease.Lease, rerr error, rr lease.ReleaseResult, lerr error) {
	ta, run := int64(l.Token()), l.RunID().String()
	o := Lost
	if !errors.Is(rerr, lease.ErrLost) {
		o = Failed
	}
	t.emit(Event{Actor: ActorA, Kind: KindRenew, Outcome: o, Token: ta, RunID: run, Cause: fmt.Sprint(rerr),
		Detail: "late renewal by run_id: the database refuses (ErrLost) — a late heartbeat cannot revive an expired lease"})
	o = Lost
	if lerr != nil || rr != lease.ReleaseNotHolder {
		o = Failed
	}
	t.emit(Event{Actor: ActorA, Kind: KindRelease, Outcome: o, Token: ta, RunID: run, Status: rr.String(), Cause: fmt.Sprint(lerr),
		Detail: fmt.Sprintf("late release: %s — it matches run A's run_id only, B's lease is untouched", rr)})
	t.check("A's late renewal and release were refused", errors.Is(rerr, lease.ErrLost) && lerr == nil && rr == lease.ReleaseNotHolder,
		"renew: %v; release: %s%s", errText(rerr), rr, errSuffix(lerr))
}

// reconciled tells what d's UI shows for the server's answer st.
func (t *teller) reconciled(d *device, st lease.Ownership, v ui) {
	var what string
	switch v {
	case uiLive:
		what = fmt.Sprintf("ours → %s shows the run as live here", d.name)
	case uiElsewhere:
		what = fmt.Sprintf("not ours → %s shows \"continued in another window\", composer read-only, discards %s's draft", d.name, d.run)
	default:
		what = fmt.Sprintf("free → %s offers to continue here", d.name)
	}
	t.emit(Event{Actor: d.actor, Kind: KindReconcile, Outcome: OK, Token: int64(st.Token), RunID: st.RunID.String(), Status: st.State.String(),
		Detail: fmt.Sprintf("server: %s by run %s, %s", st.State, short(st.RunID), what)})
}

func (t *teller) bothSee(stA, stB lease.Ownership, lb *lease.Lease) {
	t.check("both clients see B as the owner", stA.Held() && stA.RunID == lb.RunID() && stA.Token == lb.Token() && stB.RunID == lb.RunID(),
		"desktop sees %s run %s token %d; browser sees %s run %s", stA.State, short(stA.RunID), stA.Token, stB.State, short(stB.RunID))
}

func (t *teller) released(d *device, lb *lease.Lease, rb lease.ReleaseResult) {
	t.emit(Event{Actor: d.actor, Kind: KindRelease, Outcome: OK, Token: int64(lb.Token()), RunID: lb.RunID().String(), Status: rb.String(),
		Detail: fmt.Sprintf("tool call done; release: %s", rb)})
}

func (t *teller) sceneTwo() {
	t.emit(Event{Actor: ActorDemo, Kind: KindInfo, Outcome: Note, Detail: fmt.Sprintf(
		"scene 2: continue here while the desktop is still running — the desktop runs %s again (run C, renewing every %v, nothing stalls), then the user continues in the browser",
		t.s.key, t.s.renewEvery().Round(time.Millisecond))})
}

func (t *teller) tookOverLive(lc, ld *lease.Lease) {
	tc, td := lc.Token(), ld.Token()
	t.emit(Event{Actor: ActorD, Kind: KindTakeover, Outcome: OK, Token: int64(td), RunID: ld.RunID().String(),
		Until: t.rec.Since(ld.TrustDeadline()),
		Detail: fmt.Sprintf("Takeover: granted to run %s (token %d > %d)%s while run %s still holds the key",
			short(ld.RunID()), td, tc, holderSuffix(ld.Holder()), short(lc.RunID()))})
	t.check("D's token is larger than C's, labelled browser", td > tc && ld.Holder() == "browser", "C %d, D %d, holder %q", tc, td, ld.Holder())
}

// takenOver tells how C's context ended: notice is the time from Takeover
// returning to C's context ending, margin how long before C's next
// background renewal could have been sent. With a positive margin only the
// takeover's notification can have told C; otherwise (a slow machine) the
// notification or that renewal did, and the check requires only that C was
// told within one renewal period of the takeover.
func (t *teller) takenOver(lc *lease.Lease, cause error, notice, margin time.Duration) {
	how := fmt.Sprintf("the LISTEN notification; C's next renewal was %v away", margin.Round(time.Millisecond))
	if margin <= 0 {
		how = fmt.Sprintf("the LISTEN notification or C's renewal, whichever came first: the earliest renewal was due %v before", (-margin).Round(time.Millisecond))
	}
	t.emit(Event{Actor: ActorC, Kind: KindLeaseEnd, Outcome: Lost, Token: int64(lc.Token()), RunID: lc.RunID().String(), Cause: cause.Error(),
		Detail: fmt.Sprintf("lease context cancelled %v after Takeover returned: %v (%s)",
			notice.Round(10*time.Microsecond), cause, how)})
	t.check("C's context ended promptly with ErrTakenOver, within one renewal period of the takeover", errors.Is(cause, lease.ErrTakenOver) && notice <= t.s.renewEvery(),
		"cause %q, %v after Takeover returned (renewal period %v), %s", cause, notice.Round(10*time.Microsecond), t.s.renewEvery().Round(time.Millisecond), how)
}

func (t *teller) takenOverWriteRefused(e Event, lc, ld *lease.Lease) {
	t.check("C's late "+e.Store+" write was refused as stale",
		e.Outcome == Stale && e.Presented == int64(lc.Token()) && e.Highest == int64(ld.Token()),
		"outcome %s, presented %d, highest %d", e.Outcome, e.Presented, e.Highest)
}

func (t *teller) takenOverRenewRelease(lc *lease.Lease, rerr error, rr lease.ReleaseResult, lerr error) {
	tc, run := int64(lc.Token()), lc.RunID().String()
	renewOK := errors.Is(rerr, lease.ErrTakenOver) && errors.Is(rerr, lease.ErrLost)
	o := Lost
	if !renewOK {
		o = Failed
	}
	t.emit(Event{Actor: ActorC, Kind: KindRenew, Outcome: o, Token: tc, RunID: run, Cause: fmt.Sprint(rerr),
		Detail: "renewal by run_id: the database refuses (ErrLost) and says why (ErrTakenOver)"})
	o = Lost
	if lerr != nil || rr != lease.ReleaseNotHolder {
		o = Failed
	}
	t.emit(Event{Actor: ActorC, Kind: KindRelease, Outcome: o, Token: tc, RunID: run, Status: rr.String(), Cause: fmt.Sprint(lerr),
		Detail: fmt.Sprintf("release: %s — D's lease is untouched", rr)})
	t.check("C's renewal and release were refused", renewOK && lerr == nil && rr == lease.ReleaseNotHolder,
		"renew: %v; release: %s%s", errText(rerr), rr, errSuffix(lerr))
}

func (t *teller) bothSeeD(stC, stD lease.Ownership, ld *lease.Lease) {
	t.check("both clients see D as the owner, labelled browser",
		stC.Held() && stC.RunID == ld.RunID() && stC.Token == ld.Token() && stC.Holder == "browser" && stD.RunID == ld.RunID(),
		"desktop sees %s run %s token %d holder %q; browser sees %s run %s", stC.State, short(stC.RunID), stC.Token, stC.Holder, stD.State, short(stD.RunID))
}

func holderSuffix(h string) string {
	if h == "" {
		return ""
	}
	return fmt.Sprintf(", holder %q", h)
}

// inflight holds run A's writes that left before the stall: each runs in a
// goroutine and its answer event waits in ch until the story reads it.
type inflight struct {
	wg     sync.WaitGroup
	ch     chan Event
	recall context.CancelFunc
	heal   func()
}

func newInflight(n int, recall context.CancelFunc, heal func()) *inflight {
	return &inflight{ch: make(chan Event, n), recall: recall, heal: heal}
}

// send starts one write; its answer is emitted as soon as it returns.
func (f *inflight) send(write func() Event) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		f.ch <- write()
	}()
}

// early returns an answer that already came back, leaving it in place.
func (f *inflight) early() (Event, bool) {
	select {
	case e := <-f.ch:
		f.ch <- e
		return e, true
	default:
		return Event{}, false
	}
}

// answers waits for all answers, ordered by store ("s3" before "pg").
func (f *inflight) answers(ctx context.Context, n int) ([]Event, error) {
	out := make([]Event, 0, n)
	for len(out) < n {
		select {
		case e := <-f.ch:
			out = append(out, e)
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Store == "s3" && out[j].Store != "s3" })
	return out, nil
}

// wait recalls whatever is still in flight (story ended early) and waits.
func (f *inflight) wait() {
	f.recall()
	f.heal()
	f.wg.Wait()
}

func short(id uuid.UUID) string { return id.String()[:8] }

func short8(s string) string {
	if len(s) > 8 {
		return s[:8]
	}
	return s
}

func errText(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return " (" + err.Error() + ")"
}
