package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/guards/memguard"
	"github.com/fencekit/fencekit/internal/obs/obstest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/internal/leasemetrics"
)

// TestTakeoverDisplacesLiveHolder: the browser takes over while the desktop
// still holds the key. The desktop's context is cancelled with ErrTakenOver
// by the notification, long before its next renewal would have noticed; its
// renewal and release are refused; the new grant carries a larger token and
// the browser's label, which Inspect, a refused caller's HeldError and the
// status document report; a guard refuses the desktop's late write once the
// browser wrote.
func TestTakeoverDisplacesLiveHolder(t *testing.T) {
	e := newEnv(t)
	mt := obstest.NewMeter(t)
	desktop := e.manager(lease.Config{TTL: time.Hour, RenewEvery: 30 * time.Minute, MeterProvider: mt.Provider})
	browser := e.manager(lease.Config{TTL: time.Hour})
	k := uniqueKey(t)

	la, err := desktop.Acquire(bg(), k, lease.WithHolder("desktop"))
	require.NoError(t, err)
	require.Equal(t, "desktop", la.Holder())
	g, err := memguard.New(memguard.Config{})
	require.NoError(t, err)
	res := k.Resource("reports")
	require.NoError(t, g.Do(la.Context(), res, func(context.Context) error { return nil }))

	_, err = browser.Acquire(bg(), k)
	held, ok := isHeld(err)
	require.True(t, ok, "plain acquire of a held key: %v", err)
	require.Equal(t, "desktop", held.Holder)
	require.Contains(t, err.Error(), `"desktop"`)

	lb, err := browser.Takeover(bg(), k, lease.WithHolder("browser"))
	require.NoError(t, err)
	require.Greater(t, lb.Token(), la.Token())
	require.Equal(t, "browser", lb.Holder())

	select {
	case <-la.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the displaced holder's context was not cancelled (renewal is 30 minutes away)")
	}
	require.ErrorIs(t, context.Cause(la.Context()), lease.ErrTakenOver)
	require.NotErrorIs(t, context.Cause(la.Context()), lease.ErrLost, "a takeover is its own cause")
	require.NoError(t, lb.Err(), "the new holder keeps its lease")

	_, err = la.Renew(bg())
	require.ErrorIs(t, err, lease.ErrTakenOver)
	// The run_id-addressed form asks the database: refused, and it says why.
	_, err = browser.Renew(bg(), k, la.RunID())
	require.ErrorIs(t, err, lease.ErrLost)
	require.ErrorIs(t, err, lease.ErrTakenOver)
	rr, err := la.Release(bg())
	require.NoError(t, err)
	require.Equal(t, lease.ReleaseNotHolder, rr)

	own, err := desktop.Inspect(bg(), k)
	require.NoError(t, err)
	require.Equal(t, lease.StateHeld, own.State)
	require.Equal(t, lb.RunID(), own.RunID)
	require.Equal(t, "browser", own.Holder)
	infos := browser.Leases()
	require.Len(t, infos, 1)
	require.Equal(t, "browser", infos[0].Holder)

	// The guard: the browser writes, then the desktop's late write (its
	// token, from a context that was not cancelled) is refused as stale.
	require.NoError(t, g.Do(lb.Context(), res, func(context.Context) error { return nil }))
	late := fence.WithToken(bg(), la.Token())
	err = g.Do(late, res, func(context.Context) error { t.Error("late write ran"); return nil })
	se, stale := fence.IsStale(err)
	require.True(t, stale, "late write: %v", err)
	require.Equal(t, lb.Token(), se.Highest)

	require.EqualValues(t, 1, obstest.Value(mt.Collect(), leasemetrics.Lost, map[string]string{"cause": leasemetrics.CauseTakenOver}))
}

// TestTakeoverOfFreeKeyAndOwnLease: Takeover of a free key is a grant; a
// takeover of a lease held by the same Manager ends that lease before
// Takeover returns.
func TestTakeoverOfFreeKeyAndOwnLease(t *testing.T) {
	e := newEnv(t)
	m := e.manager(lease.Config{})
	k := uniqueKey(t)
	l1, err := m.Takeover(bg(), k)
	require.NoError(t, err)
	require.Empty(t, l1.Holder())
	own, err := m.Inspect(bg(), k)
	require.NoError(t, err)
	require.Equal(t, l1.RunID(), own.RunID)
	require.Empty(t, own.Holder)

	l2, err := m.Takeover(bg(), k)
	require.NoError(t, err)
	require.ErrorIs(t, l1.Err(), lease.ErrTakenOver, "ended before Takeover returned")
	require.Greater(t, l2.Token(), l1.Token())

	// A released key is free: no run is displaced, nothing is notified.
	_, err = l2.Release(bg())
	require.NoError(t, err)
	l3, err := m.Takeover(bg(), k)
	require.NoError(t, err)
	require.Greater(t, l3.Token(), l2.Token())
	require.ErrorIs(t, l2.Err(), lease.ErrReleased)
}

// TestTakeoverBadInputChangesNothing: an invalid key or holder label, an
// option of another call, or an Authorizer refusal, sends nothing: no row,
// no token drawn.
func TestTakeoverBadInputChangesNothing(t *testing.T) {
	e := newEnv(t)
	deny := errors.New("not this user")
	m := e.manager(lease.Config{Authorizer: lease.AuthorizerFunc(func(_ context.Context, k lease.Key) error {
		if k.SessionID == "denied" {
			return deny
		}
		return nil
	})})
	k := uniqueKey(t)
	seq0, called0 := e.seq()
	for _, label := range []string{"desk\ntop", strings.Repeat("x", lease.MaxHolderLen+1), "\xff"} {
		_, err := m.Takeover(bg(), k, lease.WithHolder(label))
		require.ErrorIs(t, err, lease.ErrInvalidHolder, "label %q", label)
		_, err = m.Acquire(bg(), k, lease.WithHolder(label))
		require.ErrorIs(t, err, lease.ErrInvalidHolder, "label %q", label)
		require.ErrorIs(t, err, lease.ErrInvalidOption, "label %q", label)
	}
	// An option of another call is refused, not ignored.
	for name, misplaced := range map[string]lease.Option{
		"WithWatchPoll": lease.WithWatchPoll(time.Second),
		"WithLimit":     lease.WithLimit(1),
		"WithAccount":   lease.WithAccount(k.AccountID),
		"WithHeldOnly":  lease.WithHeldOnly(),
		"WithAfter":     lease.WithAfter(k),
	} {
		_, err := m.Acquire(bg(), k, misplaced)
		require.ErrorIs(t, err, lease.ErrInvalidOption, name)
		require.ErrorContains(t, err, name, "the error names the option")
		_, err = m.Takeover(bg(), k, lease.WithHolder("desktop"), misplaced)
		require.ErrorIs(t, err, lease.ErrInvalidOption, name)
		if name != "WithWatchPoll" {
			_, err = m.Watch(bg(), k, lease.WithWatchPoll(time.Second), misplaced)
			require.ErrorIs(t, err, lease.ErrInvalidOption, name)
		}
	}
	_, err := m.Watch(bg(), k, lease.WithHolder("desktop"))
	require.ErrorIs(t, err, lease.ErrInvalidOption)
	_, err = m.Takeover(bg(), lease.Key{AccountID: "a"})
	require.ErrorIs(t, err, lease.ErrInvalidKey)
	_, err = m.Takeover(bg(), lease.Key{AccountID: k.AccountID, SessionID: "denied"})
	require.ErrorIs(t, err, lease.ErrUnauthorized)
	require.ErrorIs(t, err, deny)
	require.Zero(t, e.rowCount())
	seq1, called1 := e.seq()
	require.Equal(t, seq0, seq1)
	require.Equal(t, called0, called1)

	require.NoError(t, lease.ValidateHolder(""))
	require.NoError(t, lease.ValidateHolder("desktop ✓"))
}

// TestTakeoverRefusedOnUncheckedNode: Takeover passes the same token-floor
// gate as Acquire: on a node whose floor was not checked it is refused and
// writes nothing.
func TestTakeoverRefusedOnUncheckedNode(t *testing.T) {
	e := newEnv(t)
	m := e.manager(lease.Config{})
	_, err := e.raw.Exec(bg(), fmt.Sprintf(`UPDATE %q.fencekit_token_floor SET checked_node = 'elsewhere' WHERE id`, e.schema))
	require.NoError(t, err)
	_, err = m.Takeover(bg(), uniqueKey(t))
	require.ErrorIs(t, err, lease.ErrFailoverUnchecked)
	require.Zero(t, e.rowCount())
}

// TestTakeoverMissedNotificationStillSaysTakenOver: when the displaced
// holder's Manager misses the notification, its next background renewal is
// refused and the Manager asks the database why: the cause is still
// ErrTakenOver, not a plain loss.
func TestTakeoverMissedNotificationStillSaysTakenOver(t *testing.T) {
	e := newEnv(t)
	desktop := e.manager(lease.Config{TTL: 3 * time.Second})
	browser := e.manager(lease.Config{TTL: 3 * time.Second})
	lease.MuteTakeoverNotify(browser)
	k := uniqueKey(t)
	la, err := desktop.Acquire(bg(), k)
	require.NoError(t, err)
	lb, err := browser.Takeover(bg(), k)
	require.NoError(t, err)
	select {
	case <-la.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the displaced holder's renewal did not end it")
	}
	require.ErrorIs(t, context.Cause(la.Context()), lease.ErrTakenOver)
	require.NoError(t, lb.Err())
}

// TestTakeoverWhileListenerDownIsLearnedOnReconnect: a takeover notification
// sent while the displaced run's Manager is not listening (its listener just
// started, or is reconnecting) is lost. The Manager asks the database which
// of its leases were displaced as soon as its listener is up again, so the
// lease ends with ErrTakenOver then, not at its next renewal (here half an
// hour away).
func TestTakeoverWhileListenerDownIsLearnedOnReconnect(t *testing.T) {
	e := newEnv(t)
	pool, fault := fencetest.FaultyPool(t)
	desktop, ev, err := lease.NewObserved(lease.Config{Pool: pool, Schema: e.schema, TTL: time.Hour,
		RenewEvery: 30 * time.Minute, CallTimeout: time.Second, WaitPoll: 200 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = desktop.Close() })
	browser := e.manager(lease.Config{TTL: time.Hour})
	k := uniqueKey(t)

	la, err := desktop.Acquire(bg(), k)
	require.NoError(t, err)
	waitListener(t, ev, true)

	fault.Cut() // the desktop's listener (and pool) lose the database
	waitListener(t, ev, false)
	lb, err := browser.Takeover(bg(), k)
	require.NoError(t, err)
	require.Greater(t, lb.Token(), la.Token())
	require.NoError(t, la.Err(), "nothing can have told the desktop yet")

	fault.Restore()
	select {
	case <-la.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the displaced lease did not end after the listener reconnected (renewal is 30 minutes away)")
	}
	require.ErrorIs(t, context.Cause(la.Context()), lease.ErrTakenOver)
	require.NoError(t, lb.Err())
}

// waitListener waits for the desktop listener's next connect (up) or loss.
func waitListener(t *testing.T, ev *lease.Events, up bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case got := <-ev.Listener():
			if got == up {
				return
			}
		case <-deadline:
			t.Fatalf("listener never reported up=%v", up)
		}
	}
}

// TestTakeoverChainWhileListenerDownIsLearnedOnReconnect: the key is taken
// over twice while the first holder's listener is down, so the key's row
// names the second displaced run, not the first. The first holder still
// learns, as soon as its listener is up, that a takeover displaced it:
// its lease ends with ErrTakenOver then (its renewal is half an hour away),
// and the run_id-addressed Renew reports ErrTakenOver too.
func TestTakeoverChainWhileListenerDownIsLearnedOnReconnect(t *testing.T) {
	e := newEnv(t)
	pool, fault := fencetest.FaultyPool(t)
	desktop, ev, err := lease.NewObserved(lease.Config{Pool: pool, Schema: e.schema, TTL: time.Hour,
		RenewEvery: 30 * time.Minute, CallTimeout: time.Second, WaitPoll: 200 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = desktop.Close() })
	browser := e.manager(lease.Config{TTL: time.Hour})
	phone := e.manager(lease.Config{TTL: time.Hour})
	k := uniqueKey(t)

	la, err := desktop.Acquire(bg(), k)
	require.NoError(t, err)
	waitListener(t, ev, true)

	fault.Cut()
	waitListener(t, ev, false)
	lb, err := browser.Takeover(bg(), k)
	require.NoError(t, err)
	lc, err := phone.Takeover(bg(), k)
	require.NoError(t, err)
	require.Greater(t, lc.Token(), lb.Token())
	select {
	case <-lb.Done(): // the browser was listening
	case <-time.After(10 * time.Second):
		t.Fatal("the listening browser was not told of the second takeover")
	}
	require.ErrorIs(t, context.Cause(lb.Context()), lease.ErrTakenOver)
	require.NoError(t, la.Err(), "nothing can have told the desktop yet")

	fault.Restore()
	select {
	case <-la.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the first displaced lease did not end after the listener reconnected (renewal is 30 minutes away)")
	}
	require.ErrorIs(t, context.Cause(la.Context()), lease.ErrTakenOver)
	_, err = phone.Renew(bg(), k, la.RunID())
	require.ErrorIs(t, err, lease.ErrLost)
	require.ErrorIs(t, err, lease.ErrTakenOver, "the first displaced run, asked by run_id")
	_, err = phone.Renew(bg(), k, lb.RunID())
	require.ErrorIs(t, err, lease.ErrTakenOver, "the second displaced run, asked by run_id")
	require.NoError(t, lc.Err())
}

// TestTakeoverChainRefusedRenewalSaysTakenOver: two takeovers of the key
// whose notifications nobody hears; the first holder learns at its next
// renewal, which the database refuses. The cause is ErrTakenOver although
// the key's row names only the later displaced run.
func TestTakeoverChainRefusedRenewalSaysTakenOver(t *testing.T) {
	e := newEnv(t)
	desktop := e.manager(lease.Config{TTL: 3 * time.Second})
	browser := e.manager(lease.Config{TTL: time.Hour})
	phone := e.manager(lease.Config{TTL: time.Hour})
	lease.MuteTakeoverNotify(browser)
	lease.MuteTakeoverNotify(phone)
	k := uniqueKey(t)
	la, err := desktop.Acquire(bg(), k)
	require.NoError(t, err)
	_, err = browser.Takeover(bg(), k)
	require.NoError(t, err)
	lc, err := phone.Takeover(bg(), k)
	require.NoError(t, err)
	select {
	case <-la.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the displaced holder's renewal did not end it")
	}
	require.ErrorIs(t, context.Cause(la.Context()), lease.ErrTakenOver)
	_, err = desktop.Renew(bg(), k, la.RunID())
	require.ErrorIs(t, err, lease.ErrTakenOver)
	require.NoError(t, lc.Err())
}

// TestTakeoverCauseInEveryExecMode: the takeover statement and the question
// which runs were displaced work in every pgx QueryExecMode (the text-only
// modes are what connection poolers need): the displaced holder ends with
// ErrTakenOver, and Renew by run_id of a run displaced before a later
// takeover says ErrTakenOver.
func TestTakeoverCauseInEveryExecMode(t *testing.T) {
	e := newEnv(t)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) {
			pool := func() *pgxpool.Pool {
				return fencetest.PoolWith(t, fencetest.DatabaseURL(), func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = mode })
			}
			desktop := e.manager(lease.Config{Pool: pool(), TTL: time.Hour})
			browser := e.manager(lease.Config{Pool: pool(), TTL: time.Hour})
			k := uniqueKey(t)
			la, err := desktop.Acquire(bg(), k)
			require.NoError(t, err)
			lb, err := browser.Takeover(bg(), k)
			require.NoError(t, err)
			lc, err := browser.Takeover(bg(), k)
			require.NoError(t, err)
			require.ErrorIs(t, lb.Err(), lease.ErrTakenOver)
			select {
			case <-la.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the displaced holder was not told")
			}
			require.ErrorIs(t, context.Cause(la.Context()), lease.ErrTakenOver)
			for _, m := range []*lease.Manager{desktop, browser} {
				_, err = m.Renew(bg(), k, la.RunID())
				require.ErrorIs(t, err, lease.ErrTakenOver)
			}
			require.NoError(t, lc.Err())
		})
	}
}

// TestTakeoverStormEveryDisplacedRunSaysTakenOver: 8 Managers, each on its
// own pool, take 4 keys over from each other as fast as they can while
// renewing every 40ms, so a displaced run's refused renewal often races the
// notification of its takeover and the key has often been taken over again
// by then. Every displaced run ends with ErrTakenOver (or, on a machine too
// slow to renew in time, ErrTrustExpired), never with a plain ErrLost.
func TestTakeoverStormEveryDisplacedRunSaysTakenOver(t *testing.T) {
	e := newEnv(t)
	const managers, keys, rounds = 8, 4, 150
	ms := make([]*lease.Manager, managers)
	for i := range ms {
		ms[i] = e.manager(lease.Config{TTL: 2 * time.Second, RenewEvery: 40 * time.Millisecond})
	}
	acct := uuid.NewString()
	key := func(i int) lease.Key { return lease.Key{AccountID: acct, SessionID: strconv.Itoa(i % keys)} }
	var (
		mu   sync.Mutex
		all  []*lease.Lease
		wg   sync.WaitGroup
		errs = make(chan error, managers)
	)
	for w, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				l, err := m.Takeover(bg(), key(w+i))
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				all = append(all, l)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	// The last grant of each key is its holder; every other run was displaced.
	last := map[lease.Key]*lease.Lease{}
	for _, l := range all {
		if p := last[l.Key()]; p == nil || l.Token() > p.Token() {
			last[l.Key()] = l
		}
	}
	counts := map[string]int{}
	for _, l := range all {
		if last[l.Key()] == l {
			continue
		}
		select {
		case <-l.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("displaced run %s still live", l)
		}
		cause := context.Cause(l.Context())
		switch {
		case errors.Is(cause, lease.ErrTakenOver):
			counts["taken over"]++
		case errors.Is(cause, lease.ErrTrustExpired):
			counts["trust expired"]++
		default:
			counts[cause.Error()]++
		}
	}
	t.Logf("%d displaced runs: %v", len(all)-len(last), counts)
	require.Equal(t, len(all)-len(last), counts["taken over"]+counts["trust expired"], "causes: %v", counts)
	for _, l := range last {
		require.NoError(t, l.Err(), "the last grant of %s holds", l.Key())
	}
}
