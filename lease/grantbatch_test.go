package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
)

// batchPool is a pool large enough that grants queue on the Manager's
// statement slots, not on the pool.
func batchPool(t *testing.T) *pgxpool.Pool {
	return fencetest.PoolWith(t, fencetest.DatabaseURL(), func(c *pgxpool.Config) { c.MaxConns = 16 })
}

// Many callers of one Manager acquiring distinct keys at once: grants that
// find both statement slots taken go together in one statement, and each
// is decided as its own statement would decide it: every grant gets a
// token of its own, a key's tokens rise, the holder label is the caller's,
// and every release finds its lease.
func TestConcurrentGrantsShareStatements(t *testing.T) {
	e := newEnv(t)
	m := e.manager(lease.Config{Pool: batchPool(t)})
	const callers, cycles = 24, 15
	var (
		mu     sync.Mutex
		tokens = map[int64]lease.Key{}
		last   = map[lease.Key]int64{}
		wg     sync.WaitGroup
	)
	errs := make(chan error, callers)
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			holder := fmt.Sprintf("caller-%d", c)
			for i := range cycles {
				k := lease.Key{AccountID: "acct-" + t.Name(), SessionID: fmt.Sprintf("c%d-k%d", c, i%3)}
				l, err := m.Acquire(bg(), k, lease.WithHolder(holder))
				if err != nil {
					errs <- fmt.Errorf("caller %d acquire %d: %w", c, i, err)
					return
				}
				st, err := m.Inspect(bg(), k)
				if err == nil && st.Holder != holder {
					err = fmt.Errorf("holder %q, want %q", st.Holder, holder)
				}
				mu.Lock()
				if prev, dup := tokens[int64(l.Token())]; dup && err == nil {
					err = fmt.Errorf("token %d granted for %v and %v", l.Token(), prev, k)
				}
				tokens[int64(l.Token())] = k
				if int64(l.Token()) <= last[k] && err == nil {
					err = fmt.Errorf("%v: token %d after %d", k, l.Token(), last[k])
				}
				last[k] = int64(l.Token())
				mu.Unlock()
				if err != nil {
					errs <- err
					return
				}
				if res, err := l.Release(bg()); err != nil || res != lease.ReleaseDone {
					errs <- fmt.Errorf("caller %d release %d: %v %w", c, i, res, err)
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
	require.Len(t, tokens, callers*cycles)
	require.Positive(t, lease.SharedGrants(m), "no grant went in a shared statement: the test did not exercise coalescing")
	require.Positive(t, lease.SharedReleases(m), "no release went in a shared statement: the test did not exercise coalescing")
}

// Callers of one Manager racing for the same key: exactly one wins each
// round, whether the grants went alone or queued (a batch never holds one
// key twice; the second waits for the next statement and is refused).
func TestSameKeyOneManagerOneWinner(t *testing.T) {
	e := newEnv(t)
	m := e.manager(lease.Config{Pool: batchPool(t)})
	const callers, rounds = 12, 40
	for r := range rounds {
		k := lease.Key{AccountID: "acct-" + t.Name(), SessionID: fmt.Sprintf("round-%d", r)}
		var (
			wg     sync.WaitGroup
			start  = make(chan struct{})
			mu     sync.Mutex
			winner []*lease.Lease
		)
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				l, err := m.Acquire(bg(), k)
				if err != nil {
					if _, held := isHeld(err); !held {
						t.Errorf("round %d: %v", r, err)
					}
					return
				}
				mu.Lock()
				winner = append(winner, l)
				mu.Unlock()
			}()
		}
		close(start)
		wg.Wait()
		require.Len(t, winner, 1, "round %d", r)
		_, err := winner[0].Release(bg())
		require.NoError(t, err)
	}
}

// A caller whose ctx ends while its grant is in a shared statement gets
// ctx's error at once, and the grant, which commits anyway, is released
// by the batch once its outcome is known: no key stays held by a run
// nobody has. Shared statements are held back 300 ms (a pgx tracer) so
// that the callers' 100 ms run out while theirs is in flight.
func TestAbandonedGrantsAreReleased(t *testing.T) {
	e := newEnv(t)
	pool := fencetest.PoolWith(t, fencetest.DatabaseURL(), func(c *pgxpool.Config) {
		c.MaxConns = 16
		c.ConnConfig.Tracer = slowBatches{300 * time.Millisecond}
	})
	m := e.manager(lease.Config{Pool: pool})
	const callers = 16
	var (
		wg        sync.WaitGroup
		start     = make(chan struct{})
		mu        sync.Mutex
		abandoned []lease.Key
	)
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := lease.Key{AccountID: "acct-" + t.Name(), SessionID: fmt.Sprintf("c%d", c)}
			<-start
			ctx, cancel := context.WithTimeout(bg(), 100*time.Millisecond)
			defer cancel()
			began := time.Now()
			l, err := m.Acquire(ctx, k)
			switch {
			case err == nil:
				if _, err := l.Release(bg()); err != nil {
					t.Errorf("release: %v", err)
				}
			case errors.Is(err, context.DeadlineExceeded):
				if d := time.Since(began); d > 250*time.Millisecond {
					t.Errorf("Acquire returned %s after its ctx ended, want at once", d)
				}
				mu.Lock()
				abandoned = append(abandoned, k)
				mu.Unlock()
			default:
				t.Errorf("acquire: %v", err)
			}
		}()
	}
	close(start)
	wg.Wait()
	require.Positive(t, lease.SharedGrants(m), "no shared statement: the test did not exercise abandonment in flight")
	require.NotEmpty(t, abandoned, "no Acquire ran out of time")
	committed := 0
	for _, k := range abandoned {
		// The shared statement commits after its callers gave up: wait
		// for the key's row (they are new keys), then for it to be free.
		// A caller whose ctx ended before its statement was sent (queued
		// for a connection on a loaded machine) leaves no row at all.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if _, ok := e.row(k); ok {
				committed++
				break
			}
			if time.Now().After(deadline) {
				break
			}
		}
		waitFor(t, 10*time.Second, fmt.Sprintf("%v to be free", k), func() bool {
			st, err := m.Inspect(bg(), k)
			require.NoError(t, err)
			return st.State != lease.StateHeld
		})
	}
	require.Positive(t, committed, "no abandoned grant committed: the test did not exercise a release after abandonment")
}

// slowBatches is a pgx tracer that holds back every shared acquire
// statement (acquireBatch) by d before it is sent.
type slowBatches struct{ d time.Duration }

func (s slowBatches) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.Contains(data.SQL, "unnest(p.a, p.s, p.r, p.h)") {
		time.Sleep(s.d)
	}
	return ctx
}

func (slowBatches) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// One grant statement that stalls (held back in the client until the
// test lets it go) does not hold the Manager's other grants: once it has
// been in flight for the stall bound, the queue gets a slot of its own, and
// grants of other keys, alone and shared, come back while it is still held.
func TestStalledGrantDoesNotHoldOthers(t *testing.T) {
	e := newEnv(t)
	hold := &holdKey{session: "stuck", sent: make(chan struct{}), release: make(chan struct{})}
	pool := fencetest.PoolWith(t, fencetest.DatabaseURL(), func(c *pgxpool.Config) {
		c.MaxConns = 16
		c.ConnConfig.Tracer = hold
	})
	m := e.manager(lease.Config{Pool: pool})
	acct := "acct-" + t.Name()
	stuck := make(chan error, 1)
	go func() {
		l, err := m.Acquire(bg(), lease.Key{AccountID: acct, SessionID: "stuck"})
		if err == nil {
			_, err = l.Release(bg())
		}
		stuck <- err
	}()
	<-hold.sent
	released := false
	defer func() {
		if !released {
			close(hold.release)
			<-stuck
		}
	}()
	const callers, rounds = 6, 5
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for i := range rounds {
				k := lease.Key{AccountID: acct, SessionID: fmt.Sprintf("c%d-%d", c, i)}
				l, err := m.Acquire(bg(), k)
				if err != nil {
					t.Errorf("acquire %v: %v", k, err)
					return
				}
				if _, err := l.Release(bg()); err != nil {
					t.Errorf("release %v: %v", k, err)
					return
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("grants of other keys still waiting 20 s after one statement stalled")
	}
	select {
	case err := <-stuck:
		t.Fatalf("the held grant returned (%v) before it was let go", err)
	default:
	}
	require.Positive(t, lease.StalledGrantSlots(m), "no slot opened for the stalled statement's queue")
	close(hold.release)
	released = true
	require.NoError(t, <-stuck)
}

// holdKey is a pgx tracer that holds back the lone acquire statement of
// session until release is closed, and closes sent when it holds it.
type holdKey struct {
	session       string
	sent, release chan struct{}
}

func (h *holdKey) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.HasPrefix(strings.TrimSpace(data.SQL), "INSERT") && len(data.Args) > 1 && data.Args[1] == h.session {
		close(h.sent)
		<-h.release
	}
	return ctx
}

func (*holdKey) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Close while callers keep acquiring: every call returns (queued grants
// with ErrClosed), and nothing stays held.
func TestCloseWithQueuedGrants(t *testing.T) {
	e := newEnv(t)
	m := e.manager(lease.Config{Pool: batchPool(t)})
	const callers = 24
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				k := lease.Key{AccountID: "acct-" + t.Name(), SessionID: fmt.Sprintf("c%d-%d", c, i)}
				l, err := m.Acquire(bg(), k)
				if errors.Is(err, lease.ErrClosed) {
					return
				}
				if err != nil {
					t.Errorf("acquire: %v", err)
					return
				}
				if _, err := l.Release(bg()); err != nil && !errors.Is(err, lease.ErrClosed) {
					t.Errorf("release: %v", err)
					return
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, m.Close())
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		close(stop)
		t.Fatal("Acquire calls still running 30 s after Close")
	}
	var held int
	require.NoError(t, e.raw.QueryRow(bg(), fmt.Sprintf(`SELECT count(*) FROM %q.fencekit_leases l
	  WHERE l.released_at IS NULL AND (l.expires_at > now() AND l.expires_at <> 'infinity'
	     OR l.expires_at = 'infinity' AND EXISTS (SELECT 1 FROM %[1]q.fencekit_managers hb WHERE hb.manager_id = l.manager_id AND hb.expires_at > now()))`, e.schema)).Scan(&held))
	require.Zero(t, held, "rows still held after Close")
}
