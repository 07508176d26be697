package lease_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/memguard"
	"github.com/fencekit/fencekit/lease"
)

// bothModes runs f once per renewal mode.
func bothModes(t *testing.T, f func(t *testing.T, mode lease.RenewalMode)) {
	for _, mode := range []lease.RenewalMode{lease.RenewalHeartbeat, lease.RenewalPerLease} {
		t.Run(mode.String(), func(t *testing.T) { f(t, mode) })
	}
}

// parked reads the key and requires it held and parked by run.
func requireParked(t *testing.T, m *lease.Manager, k lease.Key, run uuid.UUID, token fence.Token) lease.Ownership {
	t.Helper()
	own, err := m.Inspect(bg(), k)
	require.NoError(t, err)
	require.Equal(t, lease.StateHeld, own.State)
	require.True(t, own.Parked, "the grant is parked")
	require.Equal(t, run, own.RunID)
	require.Equal(t, token, own.Token)
	return own
}

// TestParkResumeAcrossManagers: a run parked by Manager A (one process)
// and resumed by Manager B (another) keeps its run_id and token; while it
// is parked nobody else is granted the key, and A's Close does not end it;
// B's lease is renewed by B (it outlives several TTLs) and a guard that
// saw A's write accepts B's under the same claim, while a new grant by
// anyone else is refused.
func TestParkResumeAcrossManagers(t *testing.T) {
	bothModes(t, func(t *testing.T, mode lease.RenewalMode) {
		e := newEnv(t)
		ttl := time.Second
		a := e.manager(lease.Config{TTL: ttl, Renewal: mode})
		b := e.manager(lease.Config{TTL: ttl, Renewal: mode})
		other := e.manager(lease.Config{TTL: ttl, Renewal: mode})
		k := uniqueKey(t)

		la, err := a.Acquire(bg(), k, lease.WithHolder("replica-a"))
		require.NoError(t, err)
		g, err := memguard.New(memguard.Config{})
		require.NoError(t, err)
		res := k.Resource("notes")
		require.NoError(t, g.Do(la.Context(), res, func(context.Context) error { return nil }))

		require.NoError(t, la.Park(bg(), time.Minute))
		require.ErrorIs(t, context.Cause(la.Context()), lease.ErrParked)
		require.ErrorIs(t, la.Err(), lease.ErrParked)
		own := requireParked(t, other, k, la.RunID(), la.Token())
		require.Equal(t, "replica-a", own.Holder)
		require.Greater(t, own.Remaining, 50*time.Second, "parked for idle from the database's now, not for TTL")
		_, err = la.Release(bg())
		require.ErrorIs(t, err, lease.ErrParked, "a parked Lease's Release does not undo the park")
		_, err = la.Renew(bg())
		require.ErrorIs(t, err, lease.ErrParked)
		require.ErrorIs(t, la.Park(bg(), time.Minute), lease.ErrParked, "Park of an ended Lease returns its cause")

		_, err = other.Acquire(bg(), k)
		held, ok := isHeld(err)
		require.True(t, ok, "a parked grant is held: %v", err)
		require.Equal(t, la.RunID(), held.RunID)

		// A's Manager goes away; the parked grant does not depend on it, and
		// no renewal of A moved its expiry.
		require.NoError(t, a.Close())
		after := requireParked(t, other, k, la.RunID(), la.Token())
		require.Equal(t, own.ExpiresAt, after.ExpiresAt)

		lb, err := b.Resume(bg(), k, la.RunID())
		require.NoError(t, err)
		require.Equal(t, la.RunID(), lb.RunID())
		require.Equal(t, la.Token(), lb.Token())
		require.Equal(t, "replica-a", lb.Holder(), "the row's label is kept without WithHolder")
		claim, err := fence.ClaimFromContext(lb.Context())
		require.NoError(t, err)
		require.Equal(t, fence.Claim{Token: la.Token(), Run: la.RunID().String(), Scope: k.Scope()}, claim)
		require.Positive(t, lb.Remaining())

		own, err = other.Inspect(bg(), k)
		require.NoError(t, err)
		require.Equal(t, lease.StateHeld, own.State)
		require.False(t, own.Parked, "resumed: held by B, not parked")
		_, err = other.Acquire(bg(), k)
		_, ok = isHeld(err)
		require.True(t, ok, "a resumed grant is held: %v", err)

		// B renews it: it outlives three TTLs, its trust deadline moves.
		first := lb.TrustDeadline()
		waitFor(t, 10*time.Second, "B's renewal of the resumed lease", func() bool { return lb.TrustDeadline().After(first) })
		deadline := time.Now().Add(3 * ttl)
		waitFor(t, 10*time.Second, "three TTLs", func() bool { return time.Now().After(deadline) })
		require.NoError(t, lb.Err(), "the resumed lease is held and renewed by B")
		r, err := lb.Renew(bg())
		require.NoError(t, err)
		require.Equal(t, la.Token(), r.Token)

		require.NoError(t, g.Do(lb.Context(), res, func(context.Context) error { return nil }),
			"the guard accepts the resumed run's write: same token")

		rr, err := lb.Release(bg())
		require.NoError(t, err)
		require.Equal(t, lease.ReleaseDone, rr)
		ln, err := other.Acquire(bg(), k)
		require.NoError(t, err)
		require.Greater(t, ln.Token(), la.Token())
		var stale *fence.StaleError
		require.NoError(t, g.Do(ln.Context(), res, func(context.Context) error { return nil }))
		// A late write of the resumed run (its claim, outside its ended context).
		require.ErrorAs(t, g.Do(fence.WithClaim(bg(), claim), res, func(context.Context) error { return nil }), &stale,
			"once a later grant wrote, the resumed run's token is stale")
	})
}

// TestParkedGrantExpires: a parked grant that nobody resumes expires after
// idle: Resume then reports ErrLost (not a takeover), and a new grant gets
// a larger token.
func TestParkedGrantExpires(t *testing.T) {
	bothModes(t, func(t *testing.T, mode lease.RenewalMode) {
		e := newEnv(t)
		a := e.manager(lease.Config{Renewal: mode})
		b := e.manager(lease.Config{Renewal: mode})
		k := uniqueKey(t)
		la, err := a.Acquire(bg(), k)
		require.NoError(t, err)
		require.NoError(t, la.Park(bg(), 200*time.Millisecond))
		waitFor(t, 10*time.Second, "the parked grant to expire", func() bool {
			own, err := b.Inspect(bg(), k)
			require.NoError(t, err)
			return own.State == lease.StateExpired
		})
		_, err = b.Resume(bg(), k, la.RunID())
		require.ErrorIs(t, err, lease.ErrLost)
		require.NotErrorIs(t, err, lease.ErrTakenOver)
		require.NotErrorIs(t, err, lease.ErrRunActive)
		lb, err := b.Acquire(bg(), k)
		require.NoError(t, err)
		require.Greater(t, lb.Token(), la.Token())
		_, err = a.Resume(bg(), k, la.RunID())
		require.ErrorIs(t, err, lease.ErrLost, "another run holds the key now")
	})
}

// TestResumeAfterTakeover: a Takeover of a parked grant displaces the run;
// Resume says so (ErrLost and ErrTakenOver).
func TestResumeAfterTakeover(t *testing.T) {
	bothModes(t, func(t *testing.T, mode lease.RenewalMode) {
		e := newEnv(t)
		a := e.manager(lease.Config{Renewal: mode})
		b := e.manager(lease.Config{Renewal: mode})
		k := uniqueKey(t)
		la, err := a.Acquire(bg(), k)
		require.NoError(t, err)
		require.NoError(t, la.Park(bg(), time.Minute))
		lt, err := b.Takeover(bg(), k)
		require.NoError(t, err)
		require.Greater(t, lt.Token(), la.Token())
		_, err = a.Resume(bg(), k, la.RunID())
		require.ErrorIs(t, err, lease.ErrLost)
		require.ErrorIs(t, err, lease.ErrTakenOver)
		own, err := a.Inspect(bg(), k)
		require.NoError(t, err)
		require.False(t, own.Parked, "the takeover's grant is not parked")
		require.Equal(t, lt.RunID(), own.RunID)
	})
}

// TestResumeRace: Managers on independent pools resume one parked run at
// once; exactly one wins, the others are told the run is active.
func TestResumeRace(t *testing.T) {
	bothModes(t, func(t *testing.T, mode lease.RenewalMode) {
		e := newEnv(t)
		a := e.manager(lease.Config{Renewal: mode})
		const racers = 4
		ms := make([]*lease.Manager, racers)
		for i := range ms {
			ms[i] = e.manager(lease.Config{Renewal: mode})
		}
		for round := range 5 {
			k := uniqueKey(t)
			la, err := a.Acquire(bg(), k)
			require.NoError(t, err)
			require.NoError(t, la.Park(bg(), time.Minute))
			var (
				wg    sync.WaitGroup
				start = make(chan struct{})
				ls    = make([]*lease.Lease, racers)
				errs  = make([]error, racers)
			)
			for i, m := range ms {
				wg.Go(func() {
					<-start
					ls[i], errs[i] = m.Resume(bg(), k, la.RunID())
				})
			}
			close(start)
			wg.Wait()
			won := 0
			for i := range ms {
				if errs[i] == nil {
					won++
					require.Equal(t, la.Token(), ls[i].Token())
					_, err := ls[i].Release(bg())
					require.NoError(t, err)
					continue
				}
				require.ErrorIs(t, errs[i], lease.ErrRunActive, "round %d racer %d", round, i)
			}
			require.Equal(t, 1, won, "round %d: exactly one Resume wins", round)
		}
	})
}

// TestResumeRefusals: an active run (here or elsewhere), an unknown run,
// bad input, an unauthorized caller and a closed Manager.
func TestResumeRefusals(t *testing.T) {
	e := newEnv(t)
	a := e.manager(lease.Config{})
	refuse := errors.New("not a member")
	b := e.manager(lease.Config{Authorizer: lease.AuthorizerFunc(func(_ context.Context, k lease.Key) error {
		if k.SessionID == "forbidden" {
			return refuse
		}
		return nil
	})})
	k := uniqueKey(t)
	la, err := a.Acquire(bg(), k)
	require.NoError(t, err)

	_, err = b.Resume(bg(), k, la.RunID())
	require.ErrorIs(t, err, lease.ErrRunActive, "active in another Manager")
	_, err = a.Resume(bg(), k, la.RunID())
	require.ErrorIs(t, err, lease.ErrRunActive, "active in this Manager")
	require.NoError(t, la.Err(), "a refused Resume leaves the active lease alone")

	_, err = b.Resume(bg(), k, uuid.New())
	require.ErrorIs(t, err, lease.ErrLost, "another run holds the key")
	_, err = b.Resume(bg(), uniqueKey(t), uuid.New())
	require.ErrorIs(t, err, lease.ErrLost, "no row")

	_, err = b.Resume(bg(), k, uuid.Nil)
	require.ErrorIs(t, err, lease.ErrInvalidRunID)
	_, err = b.Resume(bg(), lease.Key{AccountID: "a"}, la.RunID())
	require.ErrorIs(t, err, lease.ErrInvalidKey)
	_, err = b.Resume(bg(), k, la.RunID(), lease.WithHolder("bad\x00label"))
	require.ErrorIs(t, err, lease.ErrInvalidHolder)

	// The Authorizer runs before any statement: the forbidden key's parked
	// grant is left as it is.
	kf := lease.Key{AccountID: k.AccountID, SessionID: "forbidden"}
	lf, err := a.Acquire(bg(), kf)
	require.NoError(t, err)
	require.NoError(t, lf.Park(bg(), time.Minute))
	_, err = b.Resume(bg(), kf, lf.RunID())
	require.ErrorIs(t, err, lease.ErrUnauthorized)
	requireParked(t, a, kf, lf.RunID(), lf.Token())

	// WithHolder relabels the resumed grant.
	lr, err := a.Resume(bg(), kf, lf.RunID(), lease.WithHolder("replica-b"))
	require.NoError(t, err)
	require.Equal(t, "replica-b", lr.Holder())
	own, err := a.Inspect(bg(), kf)
	require.NoError(t, err)
	require.Equal(t, "replica-b", own.Holder)

	c := e.manager(lease.Config{})
	require.NoError(t, c.Close())
	_, err = c.Resume(bg(), k, la.RunID())
	require.ErrorIs(t, err, lease.ErrClosed)
}

// TestParkedRunReleaseRevokeRenew: Release by run_id and Revoke end a
// parked grant (it is live); a renewal by run_id is refused and leaves the
// parked expiry as it was.
func TestParkedRunReleaseRevokeRenew(t *testing.T) {
	bothModes(t, func(t *testing.T, mode lease.RenewalMode) {
		e := newEnv(t)
		a := e.manager(lease.Config{Renewal: mode})
		b := e.manager(lease.Config{Renewal: mode})

		k := uniqueKey(t)
		la, err := a.Acquire(bg(), k)
		require.NoError(t, err)
		require.NoError(t, la.Park(bg(), time.Minute))
		before := requireParked(t, b, k, la.RunID(), la.Token())
		_, err = b.Renew(bg(), k, la.RunID())
		require.ErrorIs(t, err, lease.ErrLost, "renewals exclude parked rows")
		after := requireParked(t, b, k, la.RunID(), la.Token())
		require.Equal(t, before.ExpiresAt, after.ExpiresAt, "a refused renewal changes nothing")

		rr, err := b.Release(bg(), k, la.RunID())
		require.NoError(t, err)
		require.Equal(t, lease.ReleaseDone, rr)
		_, err = b.Resume(bg(), k, la.RunID())
		require.ErrorIs(t, err, lease.ErrLost)

		k2 := uniqueKey(t)
		l2, err := a.Acquire(bg(), k2)
		require.NoError(t, err)
		require.NoError(t, l2.Park(bg(), time.Minute))
		rv, err := b.Revoke(bg(), k2, l2.RunID())
		require.NoError(t, err)
		require.True(t, rv.Revoked)
		_, err = b.Resume(bg(), k2, l2.RunID())
		require.ErrorIs(t, err, lease.ErrLost)
		require.NotErrorIs(t, err, lease.ErrTakenOver)
	})
}

// TestParkBadIdle: an idle bound out of range is a typed error; nothing is
// sent and the lease stays held, not parked.
func TestParkBadIdle(t *testing.T) {
	e := newEnv(t)
	m := e.manager(lease.Config{})
	k := uniqueKey(t)
	l, err := m.Acquire(bg(), k)
	require.NoError(t, err)
	for _, idle := range []time.Duration{0, -time.Second, lease.MaxParkIdle + time.Microsecond} {
		err := l.Park(bg(), idle)
		require.ErrorIs(t, err, fence.ErrInvalidConfig, "idle %s", idle)
		var ce *fence.ConfigError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, "idle", ce.Field)
	}
	require.NoError(t, l.Err())
	own, err := m.Inspect(bg(), k)
	require.NoError(t, err)
	require.False(t, own.Parked)
	require.Equal(t, l.RunID(), own.RunID)
	_, err = l.Renew(bg())
	require.NoError(t, err, "still held and renewed")
}

// TestParkLostRun: Park of a run that no longer holds its row reports the
// loss and ends the lease with it; Park of an ended lease returns its
// cause.
func TestParkLostRun(t *testing.T) {
	bothModes(t, func(t *testing.T, mode lease.RenewalMode) {
		e := newEnv(t)
		a := e.manager(lease.Config{Renewal: mode})
		b := e.manager(lease.Config{Renewal: mode})

		k := uniqueKey(t)
		la, err := a.Acquire(bg(), k)
		require.NoError(t, err)
		e.expire(k)
		err = la.Park(bg(), time.Minute)
		require.ErrorIs(t, err, lease.ErrLost)
		require.ErrorIs(t, la.Err(), lease.ErrLost)

		k2 := uniqueKey(t)
		l2, err := a.Acquire(bg(), k2)
		require.NoError(t, err)
		lt, err := b.Takeover(bg(), k2)
		require.NoError(t, err)
		err = l2.Park(bg(), time.Minute)
		require.ErrorIs(t, err, lease.ErrTakenOver)
		require.ErrorIs(t, l2.Err(), lease.ErrTakenOver)
		own, err := b.Inspect(bg(), k2)
		require.NoError(t, err)
		require.Equal(t, lt.RunID(), own.RunID)
		require.False(t, own.Parked)

		k3 := uniqueKey(t)
		l3, err := a.Acquire(bg(), k3)
		require.NoError(t, err)
		_, err = l3.Release(bg())
		require.NoError(t, err)
		require.ErrorIs(t, l3.Park(bg(), time.Minute), lease.ErrReleased)
	})
}

// TestParkUnknownOutcome: a park whose statement fails (here: its ctx has
// ended) still ends the lease (ErrParked). In heartbeat mode the row would
// otherwise stay held by the Manager's heartbeat for as long as it runs:
// the Manager parks it again in the background. In per-lease mode it is a
// row nobody renews, which expires within TTL.
func TestParkUnknownOutcome(t *testing.T) {
	bothModes(t, func(t *testing.T, mode lease.RenewalMode) {
		e := newEnv(t)
		a := e.manager(lease.Config{Renewal: mode, TTL: time.Second})
		b := e.manager(lease.Config{Renewal: mode})
		k := uniqueKey(t)
		la, err := a.Acquire(bg(), k)
		require.NoError(t, err)
		ended, cancel := context.WithCancel(bg())
		cancel()
		err = la.Park(ended, time.Minute)
		require.Error(t, err)
		require.NotErrorIs(t, err, lease.ErrLost)
		require.ErrorIs(t, la.Err(), lease.ErrParked)
		if mode == lease.RenewalHeartbeat {
			waitFor(t, 10*time.Second, "the background park", func() bool {
				own, err := b.Inspect(bg(), k)
				require.NoError(t, err)
				return own.Parked
			})
			waitFor(t, 10*time.Second, "the retry to be settled", func() bool { return lease.Unreleased(a) == 0 })
			lb, err := b.Resume(bg(), k, la.RunID())
			require.NoError(t, err)
			require.Equal(t, la.Token(), lb.Token())
			return
		}
		_, err = b.Resume(bg(), k, la.RunID())
		require.ErrorIs(t, err, lease.ErrRunActive, "a per-lease row of A, renewed by nobody")
		waitFor(t, 10*time.Second, "the unrenewed row to expire", func() bool {
			own, err := b.Inspect(bg(), k)
			require.NoError(t, err)
			return own.State == lease.StateExpired
		})
	})
}

// TestParkWatch: watchers see a park and a resume as changes of Parked on
// the same grant (WatchRenewed), never as a release.
func TestParkWatch(t *testing.T) {
	e := newEnv(t)
	a := e.manager(lease.Config{})
	b := e.manager(lease.Config{})
	k := uniqueKey(t)
	la, err := a.Acquire(bg(), k)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(bg(), 20*time.Second)
	defer cancel()
	w, err := b.Watch(ctx, k, lease.WithWatchPoll(20*time.Millisecond))
	require.NoError(t, err)
	defer w.Close()
	ev, err := w.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, lease.WatchCurrent, ev.Kind)
	require.False(t, ev.Parked)

	next := func(parked bool) {
		t.Helper()
		for {
			ev, err := w.Next(ctx)
			require.NoError(t, err)
			require.NotEqual(t, lease.WatchReleased, ev.Kind, "a park or resume is no release")
			require.NotEqual(t, lease.WatchExpired, ev.Kind)
			require.Equal(t, la.Token(), ev.Token)
			if ev.Kind == lease.WatchRenewed && ev.Parked == parked {
				return
			}
		}
	}
	require.NoError(t, la.Park(bg(), time.Minute))
	next(true)
	lb, err := b.Resume(bg(), k, la.RunID())
	require.NoError(t, err)
	next(false)
	_, err = lb.Release(bg())
	require.NoError(t, err)
	ev, err = w.Next(ctx)
	require.NoError(t, err)
	for ev.Kind == lease.WatchRenewed {
		ev, err = w.Next(ctx)
		require.NoError(t, err)
	}
	require.Equal(t, lease.WatchReleased, ev.Kind)
}

// TestParkThenClose: Close releases the leases a Manager holds but leaves
// its parked grants parked; a Lease parked inside Run is not released by
// Run.
func TestParkThenClose(t *testing.T) {
	bothModes(t, func(t *testing.T, mode lease.RenewalMode) {
		e := newEnv(t)
		a := e.manager(lease.Config{Renewal: mode})
		b := e.manager(lease.Config{Renewal: mode})
		var parked, held []*lease.Lease
		for i := range 6 {
			l, err := a.Acquire(bg(), uniqueKey(t))
			require.NoError(t, err)
			if i%2 == 0 {
				require.NoError(t, l.Park(bg(), time.Minute))
				parked = append(parked, l)
			} else {
				held = append(held, l)
			}
		}
		kr := uniqueKey(t)
		var runParked *lease.Lease
		require.NoError(t, a.Run(bg(), kr, func(_ context.Context, l *lease.Lease) error {
			runParked = l
			return l.Park(bg(), time.Minute)
		}))
		parked = append(parked, runParked)
		require.NoError(t, a.Close())
		for _, l := range held {
			require.ErrorIs(t, l.Err(), lease.ErrClosed)
			own, err := b.Inspect(bg(), l.Key())
			require.NoError(t, err)
			require.Equal(t, lease.StateReleased, own.State)
		}
		for _, l := range parked {
			require.ErrorIs(t, l.Err(), lease.ErrParked)
			requireParked(t, b, l.Key(), l.RunID(), l.Token())
			lb, err := b.Resume(bg(), l.Key(), l.RunID())
			require.NoError(t, err)
			_, err = lb.Release(bg())
			require.NoError(t, err)
		}
	})
}

// TestEarlierReleaseMeetsParkedGrant: to a Manager of an earlier release
// (its statements verbatim, which know nothing of parking or heartbeats)
// a parked grant is a live row with a finite expiry: its acquire is
// refused until the park expires, and its takeover displaces the run, which
// Resume then reports. The grant statements of this release are those of
// the release before parking, unchanged (migration 0012 needs none).
func TestEarlierReleaseMeetsParkedGrant(t *testing.T) {
	e := newEnv(t)
	m := e.manager(lease.Config{})
	old := newOldManager(t, e.schema, time.Minute)

	k := uniqueKey(t)
	l, err := m.Acquire(bg(), k)
	require.NoError(t, err)
	require.NoError(t, l.Park(bg(), time.Minute))
	_, err = old.grant(bg(), k, false)
	require.ErrorIs(t, err, errOldHeld, "an earlier release's acquire refuses a parked grant")
	requireParked(t, m, k, l.RunID(), l.Token())

	ot, err := old.grant(bg(), k, true)
	require.NoError(t, err)
	require.Greater(t, ot.token, int64(l.Token()))
	_, err = m.Resume(bg(), k, l.RunID())
	require.ErrorIs(t, err, lease.ErrTakenOver)

	k2 := uniqueKey(t)
	l2, err := m.Acquire(bg(), k2)
	require.NoError(t, err)
	require.NoError(t, l2.Park(bg(), 200*time.Millisecond))
	waitFor(t, 10*time.Second, "the park to expire", func() bool {
		own, err := m.Inspect(bg(), k2)
		require.NoError(t, err)
		return own.State == lease.StateExpired
	})
	og, err := old.grant(bg(), k2, false)
	require.NoError(t, err, "an expired park is free to an earlier release too")
	require.Greater(t, og.token, int64(l2.Token()))
	_, err = m.Resume(bg(), k2, l2.RunID())
	require.ErrorIs(t, err, lease.ErrLost)
}

// TestRenewalLandingAfterParkChangesNothing: a per-lease renewal collected
// before the park and landing after it renews nothing (renewals exclude
// parked rows): the parked expiry stays, and the Lease's cause stays
// ErrParked.
func TestRenewalLandingAfterParkChangesNothing(t *testing.T) {
	e := newEnv(t)
	a := e.manager(lease.Config{Renewal: lease.RenewalPerLease, TTL: time.Hour})
	k := uniqueKey(t)
	la, err := a.Acquire(bg(), k)
	require.NoError(t, err)
	require.NoError(t, la.Park(bg(), time.Second))
	before := requireParked(t, a, k, la.RunID(), la.Token())
	require.True(t, lease.RenewBatchNow(a, la), "the batched renewal statement ran")
	after := requireParked(t, a, k, la.RunID(), la.Token())
	require.Equal(t, before.ExpiresAt, after.ExpiresAt, "the late renewal did not move the parked expiry (TTL is an hour)")
	require.ErrorIs(t, la.Err(), lease.ErrParked)
	require.NotErrorIs(t, la.Err(), lease.ErrLost)
}
