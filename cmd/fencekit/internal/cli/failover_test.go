package cli_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/internal/netproxy"
	"github.com/fencekit/fencekit/internal/pgcluster"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// promotion is a lease database on a private primary with an asynchronous
// replica behind a proxy, the guard's marks on the shared server (a
// database that survives), and the grants whose writes the guard accepted.
type promotion struct {
	t                    *testing.T
	primary, replica     *pgcluster.Cluster
	link                 *netproxy.Proxy
	leaseURL, marksURL   string // the replica's (the new primary's) URL; the marks' URL
	guardSchema          string
	guard                *pgguard.Guard
	accepted             map[fence.Token]fence.Claim
	resource             map[fence.Token]string
	highest              fence.Token
	transcript           []string
	leaseEnv, marksFlags []string
}

const leaseSchema = "fk"

func newPromotion(t *testing.T) *promotion {
	t.Helper()
	p := &promotion{t: t, accepted: map[fence.Token]fence.Claim{}, resource: map[fence.Token]string{}}
	p.guardSchema = fencetest.Schema(t, migrations.Guard)
	gp := fencetest.Pool(t)
	g, err := pgguard.New(pgguard.Config{DB: gp, Schema: p.guardSchema})
	require.NoError(t, err)
	p.guard, p.marksURL = g, fencetest.DatabaseURL()
	p.marksFlags = []string{"--marks-url", p.marksURL, "--marks-schema", p.guardSchema}
	p.primary = pgcluster.New(t, pgcluster.Options{})
	p.link, err = netproxy.New(fmt.Sprintf("127.0.0.1:%d", p.primary.Port))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.link.Close() })
	return p
}

// run runs the binary and keeps its transcript.
func (p *promotion) run(env []string, args ...string) result {
	p.t.Helper()
	r := fk(p.t, env, args...)
	p.record(r)
	return r
}

func (p *promotion) record(r result) {
	p.transcript = append(p.transcript, r.transcript(p.leaseURL, "$LEASE_URL", p.marksURL, "$MARKS_URL",
		p.primary.URL("postgres"), "$PRIMARY_URL"))
}

func (p *promotion) note(format string, args ...any) {
	p.transcript = append(p.transcript, "# "+fmt.Sprintf(format, args...))
}

// burst acquires keys [from, to) on m, writes once under each grant
// through the guard and releases.
func (p *promotion) burst(m *lease.Manager, from, to int) []fence.Claim {
	p.t.Helper()
	var out []fence.Claim
	for i := from; i < to; i++ {
		k := lease.Key{AccountID: "acct", SessionID: fmt.Sprintf("s%03d", i)}
		l, err := m.Acquire(bg(), k)
		require.NoError(p.t, err)
		c := fence.Claim{Token: l.Token(), Run: l.RunID().String()}
		res := k.Resource("doc")
		require.NoError(p.t, p.guard.Fence(fence.WithClaim(bg(), c), res, c.Token, func(context.Context) error { return nil }))
		p.accepted[c.Token], p.resource[c.Token] = c, res
		p.highest = max(p.highest, c.Token)
		out = append(out, c)
		_, err = l.Release(bg())
		require.NoError(p.t, err)
	}
	return out
}

// keys is how many keys each burst grants: more than the 32 sequence
// values PostgreSQL logs ahead, so that the promoted sequence is behind.
const keys = 30

// setUp migrates the primary with the binary, starts the replica behind
// the proxy, replicates a burst of guarded grants, stalls the link, makes
// another (lost to the replica), kills the primary and cuts the link: the
// replica is ready to be promoted with a sequence behind the guards' marks.
func (p *promotion) setUp() {
	t := p.t
	r := p.run(nil, "--database-url", p.primary.URL("postgres"), "--schema", leaseSchema, "migrate", "up", "--set", "lease")
	require.Equal(t, 0, r.code, "%s", r)
	p.replica = p.primary.Replica(p.link.Host(), int(p.link.Port()), pgcluster.Options{})
	p.leaseURL = p.replica.URL("postgres")
	p.leaseEnv = db(p.leaseURL)
	pp := p.primary.Pool("postgres")
	m, err := lease.New(lease.Config{Pool: pp, Schema: leaseSchema, CallTimeout: 2 * time.Second})
	require.NoError(t, err)
	p.burst(m, 0, keys)
	waitReplayed(t, pp, p.replica.Pool("postgres"))
	p.link.Blackhole()
	p.burst(m, 0, keys)
	require.NoError(t, m.Close())
	p.primary.Kill()
	p.link.Cut()
	p.note("primary killed after %d guarded grants, the last %d not replicated; highest token the guard accepted: %d", 2*keys, keys, p.highest)
}

// resume checks that grants on the new primary carry tokens above every
// accepted one, that the guard takes their writes and refuses every
// earlier claim's.
func (p *promotion) resume(m *lease.Manager) {
	p.t.Helper()
	for i := range keys {
		k := lease.Key{AccountID: "acct", SessionID: fmt.Sprintf("s%03d", i)}
		l, err := m.Acquire(bg(), k)
		require.NoError(p.t, err)
		require.Greater(p.t, l.Token(), p.highest, "token above every accepted one")
		c := fence.Claim{Token: l.Token(), Run: l.RunID().String()}
		require.NoError(p.t, p.guard.Fence(fence.WithClaim(bg(), c), k.Resource("doc"), c.Token, func(context.Context) error { return nil }))
		_, err = l.Release(bg())
		require.NoError(p.t, err)
	}
	stale := 0
	for tok, c := range p.accepted {
		err := p.guard.Fence(fence.WithClaim(bg(), c), p.resource[tok], tok, func(context.Context) error { return nil })
		if _, ok := fence.IsStale(err); ok {
			stale++
		}
	}
	require.Equal(p.t, len(p.accepted), stale, "every earlier claim is refused as stale")
}

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
		require.True(t, time.Now().Before(deadline), "replica did not replay %s within 30s (%v)", lsn, err)
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRecoveryAfterPromotion runs the token floor recovery with the binary
// on a real promotion of an asynchronous replica that lost the last grants
// (the sequence is behind tokens the guard accepted):
//
//   - check_then_advance: floor status on the standby; floor check, started
//     as a Patroni callback before the promotion, waits for writes and then
//     exits 3 (grants stay refused, nothing recorded); status shows why; a
//     grant is refused; floor advance recovers; grants resume above every
//     accepted token and earlier claims are refused.
//   - advance_as_callback: the one-command recovery: floor advance started
//     as the callback before the promotion; grants resume when it exits.
//
// The transcripts, with timings, are logged (go test -v).
func TestRecoveryAfterPromotion(t *testing.T) {
	pgcluster.Require(t)
	for _, name := range []string{"check_then_advance", "advance_as_callback"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := newPromotion(t)
			p.setUp()
			status := func() map[string]any {
				r := p.run(p.leaseEnv, append([]string{"--schema", leaseSchema, "floor", "status", "--json"}, p.marksFlags...)...)
				require.Equal(t, 0, r.code, "%s", r)
				return r.one(t)
			}
			st := status()
			require.Equal(t, true, st["in_recovery"])
			require.Equal(t, true, st["grants_refused"])
			require.EqualValues(t, p.highest, num(t, st["source_floor"]))

			cmd := "check"
			if name == "advance_as_callback" {
				cmd = "advance"
			}
			args := append([]string{"--schema", leaseSchema, "floor", cmd, "--json"}, append(p.marksFlags, "on_role_change", "primary", "fkcluster")...)
			cb := start(t, p.leaseEnv, args...)
			wait := cb.stderrLine(t, "does not accept writes yet", time.Minute)
			p.note("started before the promotion; it waits: %s", strings.TrimSpace(wait))
			promoteStart := time.Now()
			p.replica.Promote()
			promoted := time.Now()
			p.note("replica promoted (pg_ctlcluster promote until it accepts writes: %s)", promoted.Sub(promoteStart).Round(time.Millisecond))
			r := cb.wait(t, time.Minute)
			p.record(r)
			ended := cb.start.Add(r.took)
			p.note("the callback exited %s after the promote command was issued (%s after the server was seen accepting writes)",
				ended.Sub(promoteStart).Round(time.Millisecond), ended.Sub(promoted).Round(time.Millisecond))
			rep := r.lines(t)[0]
			require.GreaterOrEqual(t, num(t, rep["attempts"]), int64(2), "it retried while the standby refused writes")

			m, err := lease.New(lease.Config{Pool: p.replica.Pool("postgres"), Schema: leaseSchema})
			require.NoError(t, err)
			t.Cleanup(func() { _ = m.Close() })
			if cmd == "check" {
				require.Equal(t, 3, r.code, "the sequence is behind the marks: %s", r)
				require.Equal(t, false, rep["ok"])
				require.LessOrEqual(t, num(t, rep["next_token"]), int64(p.highest))
				st = status()
				require.Equal(t, true, st["grants_refused"])
				require.Contains(t, st["refusal"], "grants refused until the token floor is checked on this node")
				require.Equal(t, "fail", st["check_would"])
				_, err := m.Acquire(bg(), lease.Key{AccountID: "acct", SessionID: "s000"})
				require.ErrorIs(t, err, lease.ErrFailoverUnchecked)
				p.note("a grant on the new primary: %v", err)
				r = p.run(p.leaseEnv, append([]string{"--schema", leaseSchema, "floor", "advance"}, p.marksFlags...)...)
				require.Equal(t, 0, r.code, "%s", r)
			} else {
				require.Equal(t, 0, r.code, "%s", r)
				require.Equal(t, true, rep["ok"])
				require.Greater(t, num(t, rep["next_token"]), int64(p.highest))
			}
			st = status()
			require.Equal(t, false, st["grants_refused"], "%v", st)
			require.Equal(t, st["node"], st["checked_node"])
			require.Greater(t, num(t, st["next_token"]), int64(p.highest))
			p.resume(m)
			p.note("grants resume above %d; the guard refuses the earlier claims as stale", p.highest)
			r = p.run(p.leaseEnv, append([]string{"--schema", leaseSchema, "floor", "check"}, p.marksFlags...)...)
			require.Equal(t, 0, r.code, "checking again passes: %s", r)
			t.Logf("transcript (%s):\n%s", name, strings.Join(p.transcript, "\n"))
		})
	}
}
