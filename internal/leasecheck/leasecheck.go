// Package leasecheck drives every statement a lease.Manager sends (acquire,
// inspect, renew, the background renewal of the Manager's renewal mode —
// batched per-lease renewal, or the heartbeat with its creation, the
// listener's catch-up by epoch and its end at Close — markContended and the
// release NOTIFY that wakes AcquireWait, takeover and its notification, the
// displaced-run check, watch, park and resume, the acquire and release statements that
// concurrent callers share, and the batched release at Close) through
// pools the caller provides, and fails the test when any of them does not
// work. fencekit's tests run it in every pgx QueryExecMode and through
// PgBouncer.
package leasecheck

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// Setup says where the Managers of Statements work.
type Setup struct {
	// Pool returns a new, independent pool for one Manager.
	Pool func(t testing.TB) *pgxpool.Pool
	// Schema holds the lease migrations.
	Schema string
	// Config, when set, adjusts each Manager's config (for example
	// ListenConnString) before New.
	Config func(cfg *lease.Config)
}

// wait bounds each step that waits for a background event.
const wait = 20 * time.Second

// sharers is how many callers of one Manager acquire and release at once,
// so that their statements are shared.
const sharers = 16

// Statements runs the scenario. Every Manager it builds is closed before it
// returns.
func Statements(t *testing.T, s Setup) {
	t.Helper()
	ctx := context.Background()
	// renewEvery 0 is the default.
	newManager := func(ttl, renewEvery time.Duration) *lease.Manager {
		t.Helper()
		cfg := lease.Config{Pool: s.Pool(t), Schema: s.Schema, TTL: ttl, RenewEvery: renewEvery, WaitPoll: time.Minute}
		if s.Config != nil {
			s.Config(&cfg)
		}
		m, err := lease.New(cfg)
		if err != nil {
			t.Fatalf("lease.New: %v", err)
		}
		t.Cleanup(func() { _ = m.Close() })
		return m
	}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	key := func(name string) lease.Key {
		return lease.Key{AccountID: "leasecheck", SessionID: name + "-" + time.Now().Format("150405.000000000")}
	}

	// Background renewal (batched, or the heartbeat): a short TTL, so a failing renewal ends
	// the lease at its trust deadline (well under a second).
	short := newManager(time.Second, 0)
	k1 := key("renew")
	l1, err := short.Acquire(ctx, k1)
	must("acquire", err)
	first := l1.TrustDeadline()
	deadline := time.Now().Add(wait)
	for !l1.TrustDeadline().After(first) {
		select {
		case <-l1.Done():
			t.Fatalf("batched renewal: lease ended before any background renewal succeeded: %v", context.Cause(l1.Context()))
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("batched renewal: no background renewal within the wait")
		}
	}
	_, err = l1.Renew(ctx) // the single-lease renew statement
	must("renew", err)
	// Its statement bound is about 350 ms; on a loaded machine one runs over,
	// pgx closes the connection and sends a cancel request, and PgBouncer
	// 1.18-1.20 can exit on such a request (docs/operations.md). Nothing
	// below needs it.
	must("close of the short-TTL Manager", short.Close())

	// Holder with a long TTL: a waiter can only get the key in time through
	// the release's NOTIFY (markContended, release, listener). It renews
	// every 2s: where notifications are not delivered, its next heartbeat
	// is what tells it of the takeover below.
	holder := newManager(time.Minute, 2*time.Second)
	raw := s.Pool(t)
	waiter := newManager(time.Minute, 0)
	k2 := key("wait")
	l2, err := holder.Acquire(ctx, k2, lease.WithHolder("leasecheck holder"))
	must("acquire for wait", err)
	_, err = waiter.Acquire(ctx, k2)
	var held *lease.HeldError
	if !errors.As(err, &held) || held.RunID != l2.RunID() || held.Holder != "leasecheck holder" {
		t.Fatalf("acquire of a held key: got %v, want a *HeldError naming run %s", err, l2.RunID())
	}
	st, err := waiter.Inspect(ctx, k2)
	must("inspect", err)
	if st.State != lease.StateHeld || st.RunID != l2.RunID() || st.Token != l2.Token() {
		t.Fatalf("inspect: got %+v, want held by %s token %d", st, l2.RunID(), l2.Token())
	}
	type res struct {
		l   *lease.Lease
		err error
	}
	got := make(chan res, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		l, err := waiter.AcquireWait(wctx, k2)
		got <- res{l, err}
	}()
	// Release once the waiter has flagged the row contended, so that the
	// release notifies.
	waitContended(t, raw, s.Schema, k2)
	rr, err := l2.Release(ctx)
	must("release", err)
	if rr != lease.ReleaseDone {
		t.Fatalf("release: %s, want released", rr)
	}
	r := <-got
	must("AcquireWait woken by the release", r.err)
	if r.l.Token() <= l2.Token() {
		t.Fatalf("AcquireWait: token %d not above the released %d", r.l.Token(), l2.Token())
	}
	rr, err = holder.Release(ctx, k2, l2.RunID())
	must("second release", err)
	if rr != lease.ReleaseNotHolder {
		t.Fatalf("release after the waiter's grant: %s, want not-holder", rr)
	}

	// Takeover: its notification ends the displaced holder's lease at once
	// (where notifications are not delivered: the holder's next heartbeat,
	// or the fallback poll in per-lease mode); the old run's renewal is
	// refused as taken over (displaced-run check).
	k3 := key("takeover")
	old, err := holder.Acquire(ctx, k3)
	must("acquire for takeover", err)
	w, err := waiter.Watch(ctx, k3)
	must("watch", err)
	ev, err := w.Next(ctx)
	must("watch next", err)
	if ev.Kind != lease.WatchCurrent || ev.RunID != old.RunID() {
		t.Fatalf("watch: first event %+v, want current state held by %s", ev, old.RunID())
	}
	w.Close()
	nl, err := waiter.Takeover(ctx, k3)
	must("takeover", err)
	select {
	case <-old.Done():
		if c := context.Cause(old.Context()); !errors.Is(c, lease.ErrTakenOver) {
			t.Fatalf("displaced lease ended with %v, want ErrTakenOver", c)
		}
	case <-time.After(wait):
		t.Fatal("displaced lease not ended by the takeover notification, heartbeat or fallback poll")
	}
	_, err = holder.Renew(ctx, k3, old.RunID())
	if !errors.Is(err, lease.ErrLost) || !errors.Is(err, lease.ErrTakenOver) {
		t.Fatalf("renew of the displaced run: %v, want ErrLost and ErrTakenOver", err)
	}

	// Park and Resume (migration 0012): the holder parks a run, the waiter
	// resumes it (same run and token), a renewal by run_id of a parked run
	// is refused, and a parked run is released by run_id.
	k6 := key("park")
	pl, err := holder.Acquire(ctx, k6, lease.WithHolder("leasecheck parker"))
	must("acquire for park", err)
	must("park", pl.Park(ctx, time.Minute))
	st, err = waiter.Inspect(ctx, k6)
	must("inspect of a parked grant", err)
	if st.State != lease.StateHeld || !st.Parked || st.RunID != pl.RunID() {
		t.Fatalf("inspect after park: got %+v, want held and parked by %s", st, pl.RunID())
	}
	if _, err := waiter.Renew(ctx, k6, pl.RunID()); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("renew of a parked run: %v, want ErrLost", err)
	}
	rl, err := waiter.Resume(ctx, k6, pl.RunID())
	must("resume", err)
	if rl.RunID() != pl.RunID() || rl.Token() != pl.Token() || rl.Holder() != "leasecheck parker" {
		t.Fatalf("resume: run %s token %d holder %q, want %s, %d, the row's label", rl.RunID(), rl.Token(), rl.Holder(), pl.RunID(), pl.Token())
	}
	if _, err := holder.Resume(ctx, k6, pl.RunID()); !errors.Is(err, lease.ErrRunActive) {
		t.Fatalf("resume of an active run: %v, want ErrRunActive", err)
	}
	must("park of the resumed run", rl.Park(ctx, time.Minute))
	rr, err = holder.Release(ctx, k6, pl.RunID())
	must("release of a parked run", err)
	if rr != lease.ReleaseDone {
		t.Fatalf("release of a parked run: %s, want released", rr)
	}

	// Concurrent callers of one Manager: grants and releases that find the
	// Manager's statements in flight share one (the acquireBatch and
	// releaseShared statements).
	sharing := newManager(time.Minute, 0)
	var (
		wg   sync.WaitGroup
		errs = make(chan error, sharers)
	)
	for i := range sharers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := key(fmt.Sprintf("share-%d", i))
			for range 3 {
				l, err := sharing.Acquire(ctx, k, lease.WithHolder("leasecheck sharer"))
				if err != nil {
					errs <- fmt.Errorf("concurrent acquire of %s: %w", k, err)
					return
				}
				if rr, err := l.Release(ctx); err != nil || rr != lease.ReleaseDone {
					errs <- fmt.Errorf("concurrent release of %s: %v, %w", k, rr, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}

	// The batched release at Close.
	closing := newManager(time.Minute, 0)
	k4, k5 := key("close-a"), key("close-b")
	_, err = closing.Acquire(ctx, k4)
	must("acquire for close", err)
	_, err = closing.Acquire(ctx, k5)
	must("acquire for close", err)
	must("close (batched release)", closing.Close())
	for _, k := range []lease.Key{k4, k5} {
		st, err := waiter.Inspect(ctx, k)
		must("inspect after close", err)
		if st.State != lease.StateReleased {
			t.Fatalf("after Close, %s is %s, want released", k, st.State)
		}
	}
	must("release of the takeover's lease", errOnly(nl.Release(ctx)))
	must("release of the waiter's lease", errOnly(r.l.Release(ctx)))
	must("release of the renewed lease", errOnly(l1.Release(ctx)))
}

func errOnly[T any](_ T, err error) error { return err }

// waitContended waits until AcquireWait's markContended has flagged k's
// row, reading it on raw.
func waitContended(t *testing.T, raw *pgxpool.Pool, schema string, k lease.Key) {
	t.Helper()
	q, err := migrations.QuoteIdentifier(schema)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(wait)
	for {
		var ok bool
		err := raw.QueryRow(context.Background(),
			`SELECT contended FROM `+q+`.fencekit_leases WHERE account_id = $1 AND session_id = $2`,
			k.AccountID, k.SessionID).Scan(&ok)
		if err != nil {
			t.Fatalf("reading the contended flag: %v", err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("AcquireWait did not mark the key contended")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
