package failover

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/internal/netproxy"
	"github.com/fencekit/fencekit/internal/pgcluster"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/leaseops"
	"github.com/fencekit/fencekit/sql/migrations"
)

const schema = "fk"

func bg() context.Context { return context.Background() }

// world is one lease database on a private cluster plus a PostgreSQL
// guard whose marks live on the shared test server (a database that
// survives the lease database's failover or restore).
type world struct {
	t       *testing.T
	guard   *pgguard.Guard
	marks   *pgguard.Marks
	granted map[fence.Token]fence.Claim // every token whose write a guard accepted
	res     map[fence.Token]string      // its resource
	highest fence.Token
}

func newWorld(t *testing.T) *world {
	t.Helper()
	gs := fencetest.Schema(t, migrations.Guard)
	gp := fencetest.Pool(t)
	g, err := pgguard.New(pgguard.Config{DB: gp, Schema: gs})
	require.NoError(t, err)
	mk, err := pgguard.NewMarks(pgguard.MarksConfig{DB: gp, Schema: gs})
	require.NoError(t, err)
	return &world{t: t, guard: g, marks: mk, granted: map[fence.Token]fence.Claim{}, res: map[fence.Token]string{}}
}

func migrate(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	_, err := migrations.Migrate(bg(), pool, migrations.Options{Schema: schema}, migrations.Lease)
	require.NoError(t, err)
}

func manager(t *testing.T, pool *pgxpool.Pool, cfg lease.Config) *lease.Manager {
	t.Helper()
	cfg.Pool, cfg.Schema = pool, schema
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = 2 * time.Second
	}
	m, err := lease.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func key(i int) lease.Key { return lease.Key{AccountID: "acct", SessionID: fmt.Sprintf("s%03d", i)} }

func nop(context.Context) error { return nil }

// burst acquires keys [from, to), writes once under each grant through the
// guard, and releases; it returns the grants.
func (w *world) burst(m *lease.Manager, from, to int) []fence.Claim {
	w.t.Helper()
	var out []fence.Claim
	for i := from; i < to; i++ {
		l, err := m.Acquire(bg(), key(i))
		require.NoError(w.t, err)
		c := fence.Claim{Token: l.Token(), Run: l.RunID().String()}
		res := fence.JoinResource("doc", key(i).SessionID)
		require.NoError(w.t, w.guard.Fence(fence.WithClaim(bg(), c), res, c.Token, nop))
		w.granted[c.Token], w.res[c.Token] = c, res
		w.highest = max(w.highest, c.Token)
		out = append(out, c)
		_, err = l.Release(bg())
		require.NoError(w.t, err)
	}
	return out
}

// write fences one write of claim c on resource res.
func (w *world) write(res string, c fence.Claim) error {
	return w.guard.Fence(fence.WithClaim(bg(), c), res, c.Token, nop)
}

// seqNext is the next token the database's sequence would issue.
func seqNext(t *testing.T, pool *pgxpool.Pool) fence.Token {
	t.Helper()
	var last int64
	var called bool
	require.NoError(t, pool.QueryRow(bg(), `SELECT last_value, is_called FROM fk.fencekit_token_seq`).Scan(&last, &called))
	if called {
		last++
	}
	return fence.Token(last)
}

// waitReplayed waits until the replica has replayed everything the primary
// has written so far.
func waitReplayed(t *testing.T, primary, replica *pgxpool.Pool) {
	t.Helper()
	var lsn string
	require.NoError(t, primary.QueryRow(bg(), `SELECT pg_current_wal_lsn()::text`).Scan(&lsn))
	deadline := time.Now().Add(30 * time.Second)
	for {
		var ok bool
		err := replica.QueryRow(bg(), `SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn`, lsn).Scan(&ok)
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica did not replay %s within 30s (%v)", lsn, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// acquireAll tries every key once and counts refusals by kind.
func acquireAll(t *testing.T, m *lease.Manager, n int) (unchecked, other int, first error) {
	t.Helper()
	for i := range n {
		l, err := m.Acquire(bg(), key(i))
		switch {
		case errors.Is(err, lease.ErrFailoverUnchecked):
			unchecked++
		case err != nil:
			other++
		default:
			other++
			_, _ = l.Release(bg())
		}
		if first == nil {
			first = err
		}
	}
	return unchecked, other, first
}

// resume checks that grants after the floor check carry tokens above every
// token a guard accepted, that the guards take their writes, and that a
// write under any earlier claim is refused.
func (w *world) resume(m *lease.Manager, n int) {
	w.t.Helper()
	for i := range n {
		l, err := m.Acquire(bg(), key(i))
		require.NoError(w.t, err)
		require.Greater(w.t, l.Token(), w.highest, "token above every accepted token")
		res := fence.JoinResource("doc", key(i).SessionID)
		require.NoError(w.t, w.write(res, fence.Claim{Token: l.Token(), Run: l.RunID().String()}))
		_, err = l.Release(bg())
		require.NoError(w.t, err)
	}
	refused := 0
	for tok, c := range w.granted {
		if _, stale := fence.IsStale(w.write(w.res[tok], c)); stale {
			refused++
		}
	}
	require.Equal(w.t, len(w.granted), refused, "every earlier claim is refused as stale")
}

// TestAsyncFailover: an asynchronous replica behind a stalled link is
// promoted after the primary is killed. Processes reconnect at once: every
// grant is refused with ErrFailoverUnchecked (none re-uses a token) until
// the floor check, fed by the surviving guards' marks, advances the
// sequence; then grants resume above every accepted token. The same with
// the documented procedure run before any process reconnects.
func TestAsyncFailover(t *testing.T) {
	for _, procedureFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("procedure_first=%v", procedureFirst), func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			p := pgcluster.New(t, pgcluster.Options{})
			link, err := netproxy.New(fmt.Sprintf("127.0.0.1:%d", p.Port))
			require.NoError(t, err)
			t.Cleanup(func() { _ = link.Close() })
			pp := p.Pool("postgres")
			migrate(t, pp)
			r := p.Replica(link.Host(), int(link.Port()), pgcluster.Options{})
			rp := r.Pool("postgres")
			m := manager(t, pp, lease.Config{})
			const keys = 30
			w.burst(m, 0, keys)
			waitReplayed(t, pp, rp)
			link.Blackhole() // the replica stops receiving WAL
			lost := w.burst(m, 0, keys)
			require.NoError(t, m.Close())
			p.Kill()
			link.Cut() // nothing buffered in the proxy reaches the replica
			r.Promote()
			promoted := time.Now()
			next := seqNext(t, rp)
			reusable := 0
			for _, c := range lost {
				if c.Token >= next {
					reusable++
				}
			}
			require.Positive(t, reusable, "the promoted sequence is behind accepted tokens (the hazard)")
			// Had a re-used token been issued to another run, the guards
			// would refuse its writes as reused.
			for _, c := range lost[len(lost)-reusable:] {
				err := w.write(w.res[c.Token], fence.Claim{Token: c.Token, Run: uuid.NewString()})
				require.ErrorIs(t, err, fence.ErrTokenReused, "token %d under another run", c.Token)
			}

			floor, err := leaseops.NewTokenFloor(leaseops.TokenFloorConfig{Pool: rp, Schema: schema, Source: w.marks.Highest})
			require.NoError(t, err)
			var unchecked, other int
			var tillClosed time.Duration
			if procedureFirst {
				_, err := floor.Check(bg())
				require.ErrorIs(t, err, lease.ErrTokenFloor)
				_, err = leaseops.CheckFloor(bg(), rp, schema, lease.FloorConfig{Source: w.marks.Highest})
				require.NoError(t, err)
			} else {
				m2 := manager(t, rp, lease.Config{})
				var first error
				unchecked, other, first = acquireAll(t, m2, keys)
				tillClosed = time.Since(promoted)
				require.ErrorIs(t, first, lease.ErrFailoverUnchecked)
				require.Equal(t, keys, unchecked, "every grant refused before the floor check")
				require.Zero(t, other)
				_, err := floor.Check(bg())
				require.ErrorIs(t, err, lease.ErrTokenFloor, "the check sees the sequence behind the marks")
				_, _, first = acquireAll(t, m2, 1)
				require.ErrorIs(t, first, lease.ErrFailoverUnchecked, "a failed check records nothing")
				_, err = leaseops.CheckFloor(bg(), rp, schema, lease.FloorConfig{Source: w.marks.Highest})
				require.NoError(t, err)
			}
			m3 := manager(t, rp, lease.Config{})
			w.resume(m3, keys)
			t.Logf("async failover (procedure first %v): grants lost %d of %d after the stall; %d of them re-usable by the promoted sequence (next %d, highest accepted %d); grants refused before the check %d; tokens re-used 0; all refused within %s of promotion",
				procedureFirst, len(lost), 2*keys, reusable, next, w.highest, unchecked, tillClosed)
		})
	}
}

// TestSyncStandbyFailover: with a synchronous standby nothing is lost and
// nothing is re-used; with the link stalled, a grant times out within
// CallTimeout instead of being granted.
func TestSyncStandbyFailover(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := pgcluster.New(t, pgcluster.Options{})
	link, err := netproxy.New(fmt.Sprintf("127.0.0.1:%d", p.Port))
	require.NoError(t, err)
	t.Cleanup(func() { _ = link.Close() })
	pp := p.Pool("postgres")
	migrate(t, pp)
	r := p.Replica(link.Host(), int(link.Port()), pgcluster.Options{})
	rp := r.Pool("postgres")
	p.Set("synchronous_standby_names = '*'")
	p.Reload()
	waitReplayed(t, pp, rp)
	const bound = time.Second
	m := manager(t, pp, lease.Config{CallTimeout: bound})
	const keys = 30
	w.burst(m, 0, keys)

	link.Blackhole()
	start := time.Now()
	_, err = m.Acquire(bg(), key(keys+1))
	took := time.Since(start)
	require.Error(t, err, "no grant without the standby's acknowledgement")
	require.Less(t, took, bound+time.Second, "the refusal comes within the call bound")
	// Close expires the Manager's heartbeat epoch (heartbeat mode), a write
	// that cannot commit without the standby: it gives up within the call
	// bound and says so, instead of hanging. It first waits for a
	// background statement in flight (a heartbeat beat, itself bounded by
	// CallTimeout), then runs its own under one CallTimeout: two bounds.
	start = time.Now()
	if err := m.Close(); err != nil {
		require.ErrorIs(t, err, context.DeadlineExceeded, "Close fails only by the call bound")
	}
	require.Less(t, time.Since(start), 2*bound+time.Second, "Close returns within two call bounds")
	p.Kill()
	link.Cut()
	r.Promote()
	next := seqNext(t, rp)
	require.Greater(t, next, w.highest, "nothing lost: the promoted sequence is past every accepted token")

	m2 := manager(t, rp, lease.Config{})
	_, _, first := acquireAll(t, m2, 1)
	require.ErrorIs(t, first, lease.ErrFailoverUnchecked, "a new timeline is unchecked even when nothing was lost")
	floor, err := leaseops.NewTokenFloor(leaseops.TokenFloorConfig{Pool: rp, Schema: schema, Source: w.marks.Highest})
	require.NoError(t, err)
	_, err = floor.Check(bg())
	require.NoError(t, err, "no advance needed")
	w.resume(m2, keys)
	t.Logf("synchronous standby: grants lost 0 of %d; promoted next token %d > highest accepted %d; stalled-link grant refused after %s (bound %s)",
		keys, next, w.highest, took.Round(time.Millisecond), bound)
}

// TestPrimaryCrashRestart: the primary is stopped -m immediate and started
// again. Holders' contexts end by their trust deadlines while it is down;
// tokens after the restart are above every earlier token; stale writes are
// refused; the same node needs no floor check.
func TestPrimaryCrashRestart(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := pgcluster.New(t, pgcluster.Options{})
	pp := p.Pool("postgres")
	migrate(t, pp)
	m := manager(t, pp, lease.Config{TTL: 2 * time.Second, CallTimeout: 500 * time.Millisecond})
	w.burst(m, 0, 10)
	var held []*lease.Lease
	for i := 10; i < 15; i++ {
		l, err := m.Acquire(bg(), key(i))
		require.NoError(t, err)
		c := fence.Claim{Token: l.Token(), Run: l.RunID().String()}
		res := fence.JoinResource("doc", key(i).SessionID)
		require.NoError(t, w.write(res, c))
		w.granted[c.Token], w.res[c.Token] = c, res
		w.highest = max(w.highest, c.Token)
		held = append(held, l)
	}
	p.Kill()
	var late time.Duration
	for _, l := range held {
		select {
		case <-l.Done():
		case <-time.After(time.Until(l.TrustDeadline()) + time.Second):
			t.Fatalf("lease %s still live a second after its trust deadline", l.Key())
		}
		late = max(late, time.Since(l.TrustDeadline()))
		require.Error(t, l.Err())
	}
	p.Start()
	m2 := manager(t, p.Pool("postgres"), lease.Config{})
	deadline := time.Now().Add(10 * time.Second)
	for i := 10; i < 15; i++ { // wait out the dead holders' TTL on the database clock
		for {
			l, err := m2.Acquire(bg(), key(i))
			if err == nil {
				require.Greater(t, l.Token(), w.highest)
				_, _ = l.Release(bg())
				break
			}
			require.ErrorIs(t, err, lease.ErrHeld, "no fail-closed refusal on the same node")
			require.True(t, time.Now().Before(deadline), "lease %d never expired", i)
			time.Sleep(50 * time.Millisecond)
		}
	}
	w.resume(m2, 15)
	t.Logf("crash/restart: holders' contexts ended at most %s after their trust deadlines; tokens after restart above %d; writes under %d earlier claims refused as stale",
		late.Round(time.Millisecond), w.highest, len(w.granted))
}

// TestRestoreFromDump: pg_dump of an older state restored with pg_restore
// into a fresh database fails closed until the floor check, then tokens
// are above the guards' marks.
func TestRestoreFromDump(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := pgcluster.New(t, pgcluster.Options{})
	p.CreateDatabase("app")
	pp := p.Pool("app")
	migrate(t, pp)
	m := manager(t, pp, lease.Config{})
	const keys = 20
	w.burst(m, 0, keys)
	dump := p.Dump("app")
	w.burst(m, 0, keys) // accepted after the dump: the restore goes back before them
	require.NoError(t, m.Close())
	p.CreateDatabase("restored")
	p.Restore(dump, "restored")
	rp := p.Pool("restored")
	require.LessOrEqual(t, seqNext(t, rp), w.highest, "the restored sequence is behind (the hazard)")

	m2 := manager(t, rp, lease.Config{})
	start := time.Now()
	unchecked, other, first := acquireAll(t, m2, keys)
	require.ErrorIs(t, first, lease.ErrFailoverUnchecked)
	require.Equal(t, keys, unchecked)
	require.Zero(t, other)
	floor, err := leaseops.NewTokenFloor(leaseops.TokenFloorConfig{Pool: rp, Schema: schema,
		Source: lease.MaxFloor(w.marks.Highest, lease.StaticFloor(0))})
	require.NoError(t, err)
	_, err = floor.Check(bg())
	require.ErrorIs(t, err, lease.ErrTokenFloor)
	rep, err := leaseops.CheckFloor(bg(), rp, schema, lease.FloorConfig{Source: w.marks.Highest})
	require.NoError(t, err)
	require.Greater(t, rep.Next, w.highest)
	w.resume(m2, keys)
	t.Logf("restore: grants refused before the check %d of %d (first refusal %s after connecting); tokens re-used 0; sequence advanced to %d over highest mark %d",
		unchecked, keys, time.Since(start).Round(time.Millisecond), rep.Next, w.highest)
}
