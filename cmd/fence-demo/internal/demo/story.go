package demo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/guards/s3guard"
	"github.com/fencekit/fencekit/lease"
)

// This file is the story: the fencekit calls of the two-devices scenario, in
// the order docs/walkthrough.md tells them. How each step is told (events,
// the text and SVG timelines) is in tell.go; connections, proxies and
// teardown in scenario.go.

// device is one client's view of fencekit: a Manager (its Authorizer is the
// user signed in there), a pool and the guards it writes through.
type device struct {
	actor Actor
	name  string // "desktop", "browser"
	run   string // "run A", "run B"
	mgr   *lease.Manager
	pool  *pgxpool.Pool
	s3    *s3guard.Guard
	pg    *pgguard.Guard // on pool
}

// report is the tool call's output: one object and one row, both named after
// the session key so that other sessions' reports are other resources.
type report struct {
	object   string // s3guard key
	resource string // pgguard resource
	table    string // quoted schema.table
}

// putObject is the tool call's MinIO half: the report object, one conditional
// pointer swap at the end; the claim (token and run) comes from work.
func (r report) putObject(work context.Context, s3 *s3guard.Guard, body string, meta map[string]string) (s3guard.Info, error) {
	return s3.PutBytes(work, r.object, []byte(body), s3guard.PutOptions{ContentType: "text/plain", Metadata: meta})
}

// insertRow is the tool call's PostgreSQL half: the mark and the row in ONE
// transaction; the claim comes from work.
func (r report) insertRow(work context.Context, pg *pgguard.Guard, writer Actor, body string) error {
	claim, err := fence.ClaimFromContext(work)
	if err != nil {
		return err
	}
	return pg.InTx(work, r.resource, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+r.table+` (resource, token, run_id, writer, body) VALUES ($1, $2, $3, $4, $5)`,
			r.resource, int64(claim.Token), claim.Run, string(writer), body)
		return err // stale, reused or any error: InTx rolls back; nothing commits
	})
}

// story runs the scenario's steps; every outcome is told as it happens, and
// an error means a step could not proceed.
//
//nolint:contextcheck // the lease contexts (work, workB) derive from ctx's values; the linter cannot see it
func (s *scenario) story(ctx context.Context, res *Result) error {
	key, tell := s.key, s.tell
	desktop, browser := s.desktop, s.browser
	tell.opening()

	// 1. Run A authorises and acquires.
	l, err := desktop.mgr.Acquire(ctx, key) // the Authorizer runs first; then one conditional UPSERT
	if missedCallTimeout(ctx, err) {
		l, err = s.waitFor(ctx, desktop, key)
	}
	if err != nil {
		return fmt.Errorf("run A: acquire: %w", err)
	}
	work := l.Context() // cancelled when the lease is lost; carries the claim
	res.RunA, res.TokenA = l.RunID(), l.Token()
	tell.acquired(desktop, l)
	if _, err := l.Renew(ctx); err != nil { // the background renewer does this every RenewEvery
		return fmt.Errorf("run A: renew: %w", err)
	}
	tell.renewed(desktop, l)

	// 2. The tool call writes through the guards, and the network to both
	// stores stalls with the writes on the wire. A request that has left
	// cannot be recalled by cancelling a context: the in-flight writes carry
	// the lease's claim but not its cancellation.
	stall := s.stall()
	onWire, recall := context.WithCancel(context.WithoutCancel(work))
	late := newInflight(2, recall, s.restore)
	defer late.wait()
	tell.sending(l)
	late.send(func() Event { return tell.wrote(s.writeS3(onWire, desktop)) })
	late.send(func() Event { return tell.wrote(s.writePG(onWire, desktop)) })

	// 3. A's renewals get no reply; its lease ends on its own clock.
	select {
	case <-l.Done():
		cause := context.Cause(work) //nolint:contextcheck // ErrTrustExpired, ErrLost, ErrTakenOver, ErrReleased or ErrClosed
		tell.leaseEnded(l, cause)
	case <-ctx.Done():
		return fmt.Errorf("run A's lease never ended: %w", ctx.Err())
	}

	// 4. The browser's run B looks, waits for the expiry, takes over.
	st, err := browser.mgr.Inspect(ctx, key) // the database's answer: State, RunID, Token, Remaining
	if err != nil {
		return fmt.Errorf("run B: inspect: %w", err)
	}
	tell.inspected(st)
	lb, err := s.continueHere(ctx, browser, st)
	if err != nil {
		return fmt.Errorf("run B: acquire: %w", err)
	}
	res.RunB, res.TokenB = lb.RunID(), lb.Token()
	tell.tookOver(l, lb)
	// B's writes run under B's lease context: they stop if B loses the lease.
	workB := lb.Context()
	tell.wroteB(tell.wrote(s.writeS3(workB, browser)), tell.wrote(s.writePG(workB, browser))) //nolint:contextcheck // B's lease context keeps ctx's values

	// 5. Refused before any write: a second holder and an outsider.
	_, err = s.retry.mgr.Acquire(ctx, key)
	var held *lease.HeldError
	if errors.As(err, &held) { // matches lease.ErrHeld
		tell.refusedHeld(held, err, lb) // held.RunID, held.Token, held.Remaining: show "running on another device"
	} else {
		tell.notHeld(err)
	}
	before, err := s.tokenSeq(ctx)
	if err != nil {
		return err
	}
	_, err = s.intruder.mgr.Acquire(ctx, key)
	after, serr := s.tokenSeq(ctx)
	if serr != nil {
		return serr
	}
	if errors.Is(err, lease.ErrUnauthorized) {
		tell.refusedOutsider(err, before, after) // the Authorizer said no; no statement was sent, no token drawn
	} else {
		tell.notRefused(err)
	}

	// 6. The network heals after 1.25 × TTL: A's late writes are refused.
	if err := s.until(ctx, stall.Add(s.cfg.TTL+s.cfg.TTL/4)); err != nil {
		return err
	}
	tell.stillInFlight(late)
	// The heal event is stamped just before the network is restored: A's
	// held bytes cannot be answered before it (stamped after, an answer
	// could race ahead of the stamp).
	heal := tell.healed(stall)
	s.restore()
	answers, err := late.answers(ctx, 2)
	if err != nil {
		return fmt.Errorf("run A's writes never returned: %w", err)
	}
	for _, e := range answers {
		tell.lateWriteRefused(e, l, lb, heal)
	}

	// 7. A's late renewal and release change nothing.
	runA := l.RunID()
	_, rerr := desktop.mgr.Renew(ctx, key, runA)    // errors.Is(err, lease.ErrLost): no revival of an expired lease
	rr, lerr := desktop.mgr.Release(ctx, key, runA) // lease.ReleaseNotHolder: matches A's run_id only; B is untouched
	tell.lateRenewRelease(l, rerr, rr, lerr)

	// 8. Both clients reconcile with the server; B's tool call ends.
	stA, errA := desktop.mgr.Inspect(ctx, key)
	stB, errB := browser.mgr.Inspect(ctx, key)
	if errA != nil || errB != nil {
		return fmt.Errorf("reconcile: inspect: %w", errors.Join(errA, errB))
	}
	tell.reconciled(desktop, stA, view(stA, l.RunID()))
	tell.reconciled(browser, stB, view(stB, lb.RunID()))
	tell.bothSee(stA, stB, lb)
	rb, err := lb.Release(ctx)
	if err != nil {
		return fmt.Errorf("run B: release: %w", err)
	}
	tell.released(browser, lb, rb)
	return nil
}

// continueWhileRunning is the second scene: the user goes back to the
// desktop (run C), then continues in the browser while the desktop is still
// running: the browser's run D takes the live lease over.
func (s *scenario) continueWhileRunning(ctx context.Context, res *Result) error {
	key, tell := s.key, s.tell
	desktop, browser := s.desktop.as(ActorC, "run C"), s.browser.as(ActorD, "run D")
	tell.sceneTwo()

	// 9. Run C acquires and is alive: its renewer runs, nothing stalls.
	lc, err := desktop.mgr.Acquire(ctx, key, lease.WithHolder("desktop"))
	if missedCallTimeout(ctx, err) {
		lc, err = s.waitFor(ctx, desktop, key, lease.WithHolder("desktop"))
	}
	if err != nil {
		return fmt.Errorf("run C: acquire: %w", err)
	}
	workC := lc.Context()
	res.RunC, res.TokenC = lc.RunID(), lc.Token()
	tell.acquired(desktop, lc)
	renewed := time.Now() // the next background renewal is sent no earlier than 3/4 RenewEvery from here
	if _, err := lc.Renew(ctx); err != nil {
		return fmt.Errorf("run C: renew: %w", err)
	}
	tell.renewed(desktop, lc)
	ended := endedAt(lc)
	// The tool call's result, computed under C's claim: it will be sent
	// whatever happens to C's lease (the claim, not the cancellation).
	result := context.WithoutCancel(workC)

	// 10. "Continue here" in the browser while C is still running.
	ld, err := browser.mgr.Takeover(ctx, key, lease.WithHolder("browser")) // after the Authorizer: a larger token, though C holds the key
	if err != nil {
		return fmt.Errorf("run D: takeover: %w", err)
	}
	took := time.Now()
	res.RunD, res.TokenD = ld.RunID(), ld.Token()
	tell.tookOverLive(lc, ld)

	// 11. The desktop is told at once: the takeover's notification ends C's
	// context with cause ErrTakenOver, long before C's next renewal.
	select {
	case at := <-ended:
		res.TakeoverNotice = at.Sub(took)
		cause := context.Cause(workC) //nolint:contextcheck // lease.ErrTakenOver; workC is C's lease context, which keeps ctx's values
		tell.takenOver(lc, cause, res.TakeoverNotice, renewed.Add(s.renewEvery()*3/4).Sub(at))
	case <-ctx.Done():
		return fmt.Errorf("run C's lease never ended: %w", ctx.Err())
	}

	// 12. The browser writes; then the desktop's result arrives, and both
	// guards refuse it.
	workD := ld.Context()
	tell.wroteD(tell.wrote(s.writeS3(workD, browser)), tell.wrote(s.writePG(workD, browser))) //nolint:contextcheck // D's lease context keeps ctx's values
	for _, e := range []Event{s.writeS3(result, desktop), s.writePG(result, desktop)} {       //nolint:contextcheck // C's claim without its cancellation: a result already sent
		tell.takenOverWriteRefused(tell.wrote(e), lc, ld)
	}

	// 13. C's renewal and release are refused: the database says why.
	runC := lc.RunID()
	_, rerr := desktop.mgr.Renew(ctx, key, runC)    // errors.Is(err, lease.ErrTakenOver) and lease.ErrLost
	rr, lerr := desktop.mgr.Release(ctx, key, runC) // lease.ReleaseNotHolder: D is untouched
	tell.takenOverRenewRelease(lc, rerr, rr, lerr)

	// 14. Both clients reconcile: the browser's grant, labelled "browser".
	stC, errC := desktop.mgr.Inspect(ctx, key)
	stD, errD := browser.mgr.Inspect(ctx, key)
	if errC != nil || errD != nil {
		return fmt.Errorf("reconcile: inspect: %w", errors.Join(errC, errD))
	}
	tell.reconciled(desktop, stC, view(stC, lc.RunID()))
	tell.reconciled(browser, stD, view(stD, ld.RunID()))
	tell.bothSeeD(stC, stD, ld)
	rd, err := ld.Release(ctx)
	if err != nil {
		return fmt.Errorf("run D: release: %w", err)
	}
	tell.released(browser, ld, rd)
	return nil
}

// as is d for another run of the same client: the same Manager, pool and
// guards, told as actor.
func (d *device) as(actor Actor, run string) *device {
	d.actor, d.run = actor, run // the Authorizer reads d.actor
	return d
}

// endedAt reports when l's context ends.
func endedAt(l *lease.Lease) <-chan time.Time {
	ch := make(chan time.Time, 1)
	go func() {
		<-l.Done()
		ch <- time.Now()
	}()
	return ch
}

// ui is what a client shows, decided by the server's answer.
type ui uint8

const (
	uiLive      ui = iota + 1 // the run is live here: the composer is enabled
	uiElsewhere               // continued on another device: read-only, show who
	uiFree                    // nobody holds it: offer to continue here
)

// view decides a client's UI from the server's answer st and the run the
// client started (uuid.Nil if none). The UI is a view; the server decides.
func view(st lease.Ownership, myRunID uuid.UUID) ui {
	switch {
	case st.Held() && st.RunID == myRunID: // live here
		return uiLive
	case st.Held(): // continued elsewhere: read-only, show who
		return uiElsewhere
	default: // free: offer to continue
		return uiFree
	}
}

// continueHere is run B's acquisition. While the server says the lease is
// held (A's last renewal has not expired on the database clock yet), B waits
// for the expiry the server reported and looks again, then acquires.
// Acquire is a single conditional statement: if B were early after all, it
// gets ErrHeld, and AcquireWait finishes the job. AcquireWait also finishes
// it when that statement missed its CallTimeout on a loaded machine (its
// outcome unknown: a grant it committed is released by the Manager as
// abandoned, and AcquireWait retries).
func (s *scenario) continueHere(ctx context.Context, browser *device, st lease.Ownership) (*lease.Lease, error) {
	for i := 0; st.Held() && i < 3; i++ {
		if err := s.until(ctx, time.Now().Add(st.Remaining+time.Millisecond)); err != nil {
			return nil, err
		}
		var err error
		if st, err = browser.mgr.Inspect(ctx, s.key); err != nil {
			return nil, err
		}
		s.tell.expired(st)
	}
	lb, err := browser.mgr.Acquire(ctx, s.key)
	if errors.Is(err, lease.ErrHeld) || missedCallTimeout(ctx, err) {
		wait, cancel := context.WithTimeout(ctx, 5*s.cfg.TTL)
		defer cancel()
		return browser.mgr.AcquireWait(wait, s.key) // blocks until it is free
	}
	return lb, err
}

// waitFor finishes an Acquire of a free key whose statement missed its
// CallTimeout (a loaded machine; the outcome is unknown, and a grant it
// committed is released by the Manager as abandoned): AcquireWait, within
// 5 TTLs.
func (s *scenario) waitFor(ctx context.Context, d *device, key lease.Key, opts ...lease.Option) (*lease.Lease, error) {
	wait, cancel := context.WithTimeout(ctx, 5*s.cfg.TTL)
	defer cancel()
	return d.mgr.AcquireWait(wait, key, opts...)
}

// missedCallTimeout reports whether err is a lease statement's own
// CallTimeout ending while the caller's ctx is still live.
func missedCallTimeout(ctx context.Context, err error) bool {
	return errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil
}

// writeS3 is the tool call's object write by d under work's claim.
func (s *scenario) writeS3(work context.Context, d *device) Event {
	c, _ := fence.ClaimFromContext(work)
	body := s.body(d.actor, c)
	info, err := s.report.putObject(work, d.s3, body, map[string]string{"writer": string(d.actor), "run_id": c.Run})
	return s.tell.s3Write(d, c, info, err)
}

// writePG is the tool call's row write by d under work's claim.
func (s *scenario) writePG(work context.Context, d *device) Event {
	c, _ := fence.ClaimFromContext(work)
	err := s.report.insertRow(work, d.pg, d.actor, s.body(d.actor, c))
	return s.tell.pgWrite(d, c, err)
}

// body is the report's content as written by actor a under claim c.
func (s *scenario) body(a Actor, c fence.Claim) string {
	return fmt.Sprintf("report for %s written by %s run %s with token %d\n", s.key, a, c.Run, c.Token)
}
