package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
)

// next reads one event with a deadline.
func next(t *testing.T, w *lease.Watcher) lease.WatchEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg(), 10*time.Second)
	defer cancel()
	ev, err := w.Next(ctx)
	require.NoError(t, err)
	return ev
}

// TestWatchReportsEveryKind follows one key through a grant, a renewal, a
// takeover, a release and an expiry, with the watcher in its own Manager.
func TestWatchReportsEveryKind(t *testing.T) {
	e := newEnv(t)
	k := uniqueKey(t)
	watcher := e.manager(lease.Config{TTL: time.Second})
	desk := e.manager(lease.Config{TTL: time.Second})
	brow := e.manager(lease.Config{TTL: time.Second})

	w, err := watcher.Watch(bg(), k, lease.WithWatchPoll(50*time.Millisecond))
	require.NoError(t, err)
	defer w.Close()
	first := next(t, w)
	require.Equal(t, lease.WatchCurrent, first.Kind)
	require.Equal(t, lease.StateNotFound, first.State)

	la, err := desk.Acquire(bg(), k, lease.WithHolder("desktop"))
	require.NoError(t, err)
	g := next(t, w)
	require.Equal(t, lease.WatchGranted, g.Kind)
	require.Equal(t, la.Token(), g.Token)
	require.Equal(t, la.RunID(), g.RunID)
	require.Equal(t, "desktop", g.Holder)
	require.True(t, g.Held())

	// The expiry timer reads the key again at the old expiry and finds it
	// renewed by the background renewer.
	r := next(t, w)
	require.Equal(t, lease.WatchRenewed, r.Kind, "got %s", r.Kind)
	require.Equal(t, la.Token(), r.Token)
	require.True(t, r.ExpiresAt.After(g.ExpiresAt))

	lb, err := brow.Takeover(bg(), k, lease.WithHolder("browser"))
	require.NoError(t, err)
	var to lease.WatchEvent
	for to = next(t, w); to.Kind == lease.WatchRenewed; to = next(t, w) {
	}
	require.Equal(t, lease.WatchTakenOver, to.Kind)
	require.Equal(t, lb.Token(), to.Token)
	require.Equal(t, lb.RunID(), to.RunID)
	require.Equal(t, la.RunID(), to.Displaced)
	require.Equal(t, "browser", to.Holder)

	_, err = lb.Release(bg())
	require.NoError(t, err)
	rel := next(t, w)
	require.Equal(t, lease.WatchReleased, rel.Kind)
	require.Equal(t, lb.Token(), rel.Token)

	lc, err := desk.Acquire(bg(), k)
	require.NoError(t, err)
	g2 := next(t, w)
	require.Equal(t, lease.WatchGranted, g2.Kind)
	require.Equal(t, lc.Token(), g2.Token)
	require.Empty(t, g2.Holder)
	e.expire(k)
	// The row now says expired while the holder may still renew; the
	// renewal is refused and the watcher reports the expiry.
	var ex lease.WatchEvent
	for ex = next(t, w); ex.Kind == lease.WatchRenewed; ex = next(t, w) {
	}
	require.Equal(t, lease.WatchExpired, ex.Kind)
	require.Equal(t, lc.Token(), ex.Token)
}

// TestWatchExpiryWithoutPoll: an expiry sends no notification; the reader's
// timer at the holder's expiry reports it although the poll is an hour.
func TestWatchExpiryWithoutPoll(t *testing.T) {
	e := newEnv(t)
	k := uniqueKey(t)
	watcher := e.manager(lease.Config{TTL: time.Second})
	holderPool := fencetest.Pool(t)
	// TTL 1s: a shorter one leaves the holder's Acquire a CallTimeout a
	// loaded machine can miss; the watcher's timer is what is tested.
	holder := e.manager(lease.Config{Pool: holderPool, TTL: time.Second})
	l, err := holder.Acquire(bg(), k)
	require.NoError(t, err)
	w, err := watcher.Watch(bg(), k, lease.WithWatchPoll(time.Hour))
	require.NoError(t, err)
	defer w.Close()
	cur := next(t, w)
	require.Equal(t, lease.WatchCurrent, cur.Kind)
	require.Equal(t, l.Token(), cur.Token)
	// Stop renewing: close the holder's pool under it (its release fails too).
	holderPool.Close()
	var ev lease.WatchEvent
	for ev = next(t, w); ev.Kind == lease.WatchRenewed; ev = next(t, w) {
	}
	require.Equal(t, lease.WatchExpired, ev.Kind)
	require.Equal(t, l.Token(), ev.Token)
	require.False(t, ev.DBNow.Before(ev.ExpiresAt), "reported once the database says expired")
}

// TestWatchOneListenerManyWatchers: 200 watchers over 4 keys in one Manager
// use one LISTEN connection, and all see a takeover.
func TestWatchOneListenerManyWatchers(t *testing.T) {
	e := newEnv(t)
	app := "watch-" + uuid.NewString()[:8]
	pool := fencetest.PoolWith(t, fencetest.DatabaseURL(), func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["application_name"] = app
	})
	watcher := e.manager(lease.Config{Pool: pool})
	other := e.manager(lease.Config{})
	keys := make([]lease.Key, 4)
	for i := range keys {
		keys[i] = uniqueKey(t)
		_, err := other.Acquire(bg(), keys[i])
		require.NoError(t, err)
	}
	ws := make([]*lease.Watcher, 200)
	for i := range ws {
		w, err := watcher.Watch(bg(), keys[i%len(keys)])
		require.NoError(t, err)
		defer w.Close()
		ws[i] = w
		require.Equal(t, lease.WatchCurrent, next(t, w).Kind)
	}
	var listens int
	require.NoError(t, e.raw.QueryRow(bg(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN %'`, app).Scan(&listens))
	require.Equal(t, 1, listens, "one LISTEN connection for all watchers")

	taker := e.manager(lease.Config{})
	lt, err := taker.Takeover(bg(), keys[0])
	require.NoError(t, err)
	for i := 0; i < len(ws); i += len(keys) {
		ev := next(t, ws[i])
		require.Equal(t, lease.WatchTakenOver, ev.Kind)
		require.Equal(t, lt.Token(), ev.Token)
	}
}

// TestWatchSlowWatcherGetsCurrentState: a watcher that stops reading while
// many grants happen keeps a bounded queue and, when it reads again, gets
// the latest state marked Dropped, never an older one as current; a
// watcher that keeps reading sees every takeover in token order.
func TestWatchSlowWatcherGetsCurrentState(t *testing.T) {
	e := newEnv(t)
	k := uniqueKey(t)
	watcher := e.manager(lease.Config{})
	slow, err := watcher.Watch(bg(), k)
	require.NoError(t, err)
	defer slow.Close()
	fast, err := watcher.Watch(bg(), k)
	require.NoError(t, err)
	defer fast.Close()
	require.Equal(t, lease.WatchCurrent, next(t, fast).Kind)

	var mu sync.Mutex
	var seen []fence.Token
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(bg())
	defer cancel()
	go func() {
		for {
			ev, err := fast.Next(ctx)
			if err != nil {
				done <- err
				return
			}
			mu.Lock()
			seen = append(seen, ev.Token)
			mu.Unlock()
		}
	}()
	taker := e.manager(lease.Config{})
	var last fence.Token
	for range 60 {
		l, err := taker.Takeover(bg(), k)
		require.NoError(t, err)
		last = l.Token()
		// Wait until the fast watcher has seen it: every takeover is a
		// reading of its own.
		waitFor(t, 10*time.Second, "fast watcher sees the takeover", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(seen) > 0 && seen[len(seen)-1] == last
		})
	}
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	mu.Lock()
	for i := 1; i < len(seen); i++ {
		require.LessOrEqual(t, seen[i-1], seen[i], "token order")
	}
	mu.Unlock()

	ev := next(t, slow)
	require.Equal(t, lease.WatchCurrent, ev.Kind)
	require.True(t, ev.Dropped, "the slow watcher fell behind")
	require.Equal(t, last, ev.Token, "and gets the latest grant")
}

// TestWatchRefusedAndClosed: an unauthorized Watch registers nothing; a
// Watcher ends with its ctx and with the Manager.
func TestWatchRefusedAndClosed(t *testing.T) {
	e := newEnv(t)
	k := uniqueKey(t)
	deny := errors.New("not a member")
	app := "watch-" + uuid.NewString()[:8]
	pool := fencetest.PoolWith(t, fencetest.DatabaseURL(), func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["application_name"] = app
	})
	m := e.manager(lease.Config{Pool: pool, Authorizer: lease.AuthorizerFunc(func(_ context.Context, key lease.Key) error {
		if key.SessionID == "forbidden" {
			return deny
		}
		return nil
	})})
	_, err := m.Watch(bg(), lease.Key{AccountID: k.AccountID, SessionID: "forbidden"})
	require.ErrorIs(t, err, lease.ErrUnauthorized)
	require.ErrorIs(t, err, deny)
	var conns int
	require.NoError(t, e.raw.QueryRow(bg(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN %'`, app).Scan(&conns))
	require.Zero(t, conns, "a refused Watch starts no listener")

	_, err = m.Watch(bg(), lease.Key{AccountID: "", SessionID: "s"})
	require.ErrorIs(t, err, lease.ErrInvalidKey)

	ctx, cancel := context.WithCancel(bg())
	w, err := m.Watch(ctx, k)
	require.NoError(t, err)
	require.Equal(t, lease.WatchCurrent, next(t, w).Kind)
	cancel()
	_, err = w.Next(bg())
	require.ErrorIs(t, err, lease.ErrWatcherClosed)

	w2, err := m.Watch(bg(), k)
	require.NoError(t, err)
	require.Equal(t, lease.WatchCurrent, next(t, w2).Kind)
	require.NoError(t, m.Close())
	_, err = w2.Next(bg())
	require.ErrorIs(t, err, lease.ErrClosed)
	_, err = m.Watch(bg(), k)
	require.ErrorIs(t, err, lease.ErrClosed)
}

// Watch a conversation's ownership, as a client reconciling its UI would.
func ExampleManager_Watch() {
	ctx := context.Background()
	m, pool := exampleManager(ctx)
	defer pool.Close()
	defer m.Close()
	key := conversation()

	w, err := m.Watch(ctx, key)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Close()
	ev, _ := w.Next(ctx)
	fmt.Println(ev.Kind, ev.State)

	l, _ := m.Takeover(ctx, key, lease.WithHolder("browser"))
	ev, _ = w.Next(ctx)
	fmt.Println(ev.Kind, ev.Holder, ev.Token == l.Token())
	_, _ = l.Release(ctx)
	ev, _ = w.Next(ctx)
	fmt.Println(ev.Kind)
	// Output:
	// current not-found
	// granted browser true
	// released
}
