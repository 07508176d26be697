package lease_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
)

// previousRelease is the git revision whose statements
// testdata/previous_release_statements.txt copies: the last one before
// migration 0009 (there is no release tag yet).
const previousRelease = "92431b7"

// previousStatements reads the previous release's statements, by name.
func previousStatements(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("testdata/previous_release_statements.txt")
	require.NoError(t, err)
	out := map[string]string{}
	var name string
	var body strings.Builder
	flush := func() {
		if name != "" {
			out[name] = strings.TrimSuffix(body.String(), "\n")
		}
		body.Reset()
	}
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if strings.HasPrefix(line, "#") && name == "" {
			continue
		}
		if strings.HasPrefix(line, "-- ") && strings.HasSuffix(strings.TrimSpace(line), " --") {
			flush()
			name = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(line), "-- "), " --")
			continue
		}
		body.WriteString(line)
	}
	flush()
	for _, n := range []string{"acquire", "renewBatch", "release", "takeover"} {
		require.NotEmpty(t, out[n], "statement %s missing from the testdata", n)
	}
	return out
}

// TestPreviousReleaseStatementsAreVerbatim: the testdata copy equals the
// statements of the previous release in git, when git and that revision
// are available.
func TestPreviousReleaseStatementsAreVerbatim(t *testing.T) {
	src, err := exec.Command("git", "show", previousRelease+":lease/statements.go").Output()
	if err != nil {
		t.Skipf("git show %s:lease/statements.go: %v (no git or a shallow clone)", previousRelease, err)
	}
	for name, text := range previousStatements(t) {
		m := regexp.MustCompile(`(?s)\n\t\t` + name + ": r\\.Replace\\(`(.*?)`\\)").FindSubmatch(src)
		require.NotNil(t, m, "statement %s not found in %s", name, previousRelease)
		require.Equal(t, string(m[1]), text, "statement %s differs from %s", name, previousRelease)
	}
}

// oldManager runs the previous release's statements verbatim: per-lease
// rows, batched renewal (one lease per statement here), its takeover and
// release. It knows nothing of manager_id.
type oldManager struct {
	pool    *pgxpool.Pool
	st      map[string]string
	channel string
	ttl     time.Duration
	margin  time.Duration
	every   time.Duration
	wg      sync.WaitGroup
	mu      sync.Mutex
	leases  []*oldLease
}

func newOldManager(t *testing.T, schema string, ttl time.Duration) *oldManager {
	t.Helper()
	st := previousStatements(t)
	q := `"` + schema + `"`
	for n, s := range st {
		st[n] = strings.ReplaceAll(s, "$S", q)
	}
	o := &oldManager{pool: fencetest.Pool(t), st: st, channel: lease.ReleaseChannel(schema), ttl: ttl, margin: ttl / 5, every: ttl / 5}
	t.Cleanup(func() { // stop every renewer, then wait for them
		o.mu.Lock()
		for _, l := range o.leases {
			l.end()
		}
		o.mu.Unlock()
		o.wg.Wait()
	})
	return o
}

// oldLease is a grant of the old Manager: trusted until sent_at + TTL −
// margin of its last successful renewal, renewed in the background until
// released, refused, or stalled.
type oldLease struct {
	key   lease.Key
	run   uuid.UUID
	token int64
	stop  chan struct{}

	mu      sync.Mutex
	trust   time.Time
	endedAt time.Time // zero while not ended
	stalled bool
}

func payloadOf(k lease.Key) string {
	h := sha256.New()
	h.Write([]byte(k.AccountID))
	h.Write([]byte{0})
	h.Write([]byte(k.SessionID))
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// beliefEnd is when the old lease stopped believing it held the key:
// its end, or its trust deadline if that came first.
func (l *oldLease) beliefEnd() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.endedAt.IsZero() && l.endedAt.Before(l.trust) {
		return l.endedAt
	}
	return l.trust
}

func (l *oldLease) end() {
	l.mu.Lock()
	if l.endedAt.IsZero() {
		l.endedAt = time.Now()
		close(l.stop)
	}
	l.mu.Unlock()
}

var errOldHeld = errors.New("old: held")

func (o *oldManager) grant(ctx context.Context, k lease.Key, takeover bool) (*oldLease, error) {
	run := uuid.New()
	sent := time.Now()
	var token int64
	var exp time.Time
	var err error
	if takeover {
		var displaced *uuid.UUID
		var now time.Time
		err = o.pool.QueryRow(ctx, o.st["takeover"], k.AccountID, k.SessionID, run, o.ttl.Microseconds(), nil, o.channel, payloadOf(k)).
			Scan(&token, &exp, &displaced, &now)
	} else {
		err = o.pool.QueryRow(ctx, o.st["acquire"], k.AccountID, k.SessionID, run, o.ttl.Microseconds(), nil).Scan(&token, &exp)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errOldHeld
	}
	if err != nil {
		return nil, err
	}
	l := &oldLease{key: k, run: run, token: token, stop: make(chan struct{}), trust: sent.Add(o.ttl - o.margin)}
	o.mu.Lock()
	o.leases = append(o.leases, l)
	o.mu.Unlock()
	o.wg.Add(1)
	go o.renew(l)
	return l, nil
}

func (o *oldManager) renew(l *oldLease) {
	defer o.wg.Done()
	tick := time.NewTicker(o.every)
	defer tick.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		l.mu.Lock()
		stalled, trust := l.stalled, l.trust
		l.mu.Unlock()
		if time.Now().After(trust) {
			l.end() // trust expired: the old Manager cancelled it
			return
		}
		if stalled {
			continue
		}
		sent := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), o.ttl/4)
		rows, err := o.pool.Query(ctx, o.st["renewBatch"], []string{l.key.AccountID}, []string{l.key.SessionID}, []string{l.run.String()}, o.ttl.Microseconds())
		renewed := false
		if err == nil {
			renewed = rows.Next()
			rows.Close()
			err = rows.Err()
		}
		cancel()
		switch {
		case err != nil: // keep the old trust
		case renewed:
			l.mu.Lock()
			l.trust = sent.Add(o.ttl - o.margin)
			l.mu.Unlock()
		default:
			l.end() // refused: lost
			return
		}
	}
}

func (o *oldManager) release(l *oldLease) {
	l.end()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, _ = o.pool.Exec(ctx, o.st["release"], l.key.AccountID, l.key.SessionID, l.run, o.channel, payloadOf(l.key))
}

// TestRollingDeployOldTakeoverOfHeartbeatRow: the previous release's acquire
// refuses a key held by a heartbeat row, its takeover grants it, and the
// heartbeat holder learns of that takeover from its heartbeat statement
// (the notification muted) and ends the lease with ErrTakenOver.
func TestRollingDeployOldTakeoverOfHeartbeatRow(t *testing.T) {
	e := newEnv(t)
	ttl := 2 * time.Second
	m := e.manager(heartbeat(lease.Config{TTL: ttl, RenewEvery: 200 * time.Millisecond}))
	old := newOldManager(t, e.schema, ttl)
	old.channel = "fencekit_muted_for_test"
	la := acquireN(t, m, 2)
	_, err := old.grant(bg(), la[0].Key(), false)
	require.ErrorIs(t, err, errOldHeld, "the old acquire refuses a heartbeat row")
	ol, err := old.grant(bg(), la[0].Key(), true)
	require.NoError(t, err)
	defer old.release(ol)
	require.Greater(t, ol.token, la[0].Token())
	require.ErrorIs(t, waitEnded(t, la[0], 5*time.Second), lease.ErrTakenOver)
	require.NoError(t, la[1].Err())
	st, err := m.Inspect(bg(), la[0].Key())
	require.NoError(t, err)
	require.Equal(t, lease.StateHeld, st.State)
	require.Equal(t, ol.run, st.RunID, "the row is the old run's, per-lease again")
	_, err = m.Acquire(bg(), la[0].Key())
	_, held := isHeld(err)
	require.True(t, held, "the old run's per-lease row is live: %v", err)
	// Released by the old Manager: free for the new one.
	old.release(ol)
	l, err := m.Acquire(bg(), la[0].Key())
	require.NoError(t, err)
	require.Greater(t, l.Token(), ol.token)
}

// grantRecord is one grant of the rolling deploy run.
type grantRecord struct {
	key      lease.Key
	token    int64
	takeover bool
	who      string
	returned time.Time        // when the grant's reply came back
	end      func() time.Time // when its holder stopped believing it held the key
}

// TestRollingDeploy: Managers running the previous release's statements,
// heartbeat Managers and a per-lease Manager contend for a few keys of one
// schema, with takeovers, releases, stalled old holders and stalled
// heartbeats. No grant by acquire is made while an earlier holder of the
// key (not displaced by a takeover in between) still trusted its lease,
// every grant's token is unique per key, and each key's row carries a
// token no smaller than any granted.
func TestRollingDeploy(t *testing.T) {
	e := newEnv(t)
	const ttl = time.Second
	keys := []lease.Key{uniqueKey(t), uniqueKey(t), uniqueKey(t)}
	cfg := lease.Config{TTL: ttl, RenewEvery: 200 * time.Millisecond}
	pool, proxy := proxiedPool(t)
	defer proxy.Restore()
	stalling := heartbeat(cfg)
	stalling.Pool = pool
	news := []*lease.Manager{e.manager(stalling), e.manager(heartbeat(cfg))}
	perLease := cfg
	perLease.Renewal = lease.RenewalPerLease
	news = append(news, e.manager(perLease))
	olds := []*oldManager{newOldManager(t, e.schema, ttl), newOldManager(t, e.schema, ttl)}

	var mu sync.Mutex
	var grants []grantRecord
	record := func(g grantRecord) {
		mu.Lock()
		grants = append(grants, g)
		mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(bg(), 6*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	// Heartbeat stalls, longer than the TTL, so that a heartbeat Manager's
	// leases expire and others take the keys: the first one's network
	// blackholed (no reply: its trust deadline ends its leases), the
	// second one's heartbeat row locked (its heartbeat refused once less
	// than CallTimeout is left).
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(900 * time.Millisecond):
			}
			if i%2 == 0 {
				proxy.Blackhole()
				time.Sleep(1300 * time.Millisecond)
				proxy.Restore()
				continue
			}
			id := lease.EpochOf(news[1])
			if id == uuid.Nil {
				continue
			}
			tx, err := e.raw.Begin(bg())
			if err != nil {
				continue
			}
			_, _ = tx.Exec(bg(), fmt.Sprintf(`SELECT 1 FROM %q.fencekit_managers WHERE manager_id = $1 FOR UPDATE`, e.schema), id)
			time.Sleep(1300 * time.Millisecond)
			_ = tx.Rollback(bg())
		}
	})
	hold := func(r *rand.Rand) { time.Sleep(time.Duration(r.IntN(40)) * time.Millisecond) }
	for i, m := range news {
		for w := range 2 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(i), uint64(w)))
				for ctx.Err() == nil {
					k := keys[r.IntN(len(keys))]
					takeover := r.IntN(6) == 0
					var l *lease.Lease
					var err error
					if takeover {
						l, err = m.Takeover(ctx, k)
					} else {
						l, err = m.Acquire(ctx, k)
					}
					if err != nil {
						time.Sleep(5 * time.Millisecond)
						continue
					}
					returned := time.Now()
					record(grantRecord{key: k, token: int64(l.Token()), takeover: takeover, who: fmt.Sprintf("new%d", i), returned: returned,
						end: func() time.Time {
							trust, ended := l.TrustDeadline(), lease.EndedAt(l)
							if !ended.IsZero() && ended.Before(trust) {
								return ended
							}
							return trust
						}})
					hold(r)
					_, _ = l.Release(bg())
				}
			})
		}
	}
	for i, o := range olds {
		for w := range 2 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(10+i), uint64(w)))
				for ctx.Err() == nil {
					k := keys[r.IntN(len(keys))]
					takeover := r.IntN(6) == 0
					l, err := o.grant(ctx, k, takeover)
					if err != nil {
						time.Sleep(5 * time.Millisecond)
						continue
					}
					record(grantRecord{key: k, token: l.token, takeover: takeover, who: fmt.Sprintf("old%d", i), returned: time.Now(), end: l.beliefEnd})
					if r.IntN(8) == 0 { // stall: stop renewing and walk away; the row expires
						l.mu.Lock()
						l.stalled = true
						l.mu.Unlock()
						continue
					}
					hold(r)
					o.release(l)
				}
			})
		}
	}
	wg.Wait()
	cancel()
	for _, m := range news {
		require.NoError(t, m.Close())
	}

	// Offline check, per key in token order (the order of the grants'
	// commits, each drawn under the row lock).
	byKey := map[lease.Key][]grantRecord{}
	for _, g := range grants {
		byKey[g.key] = append(byKey[g.key], g)
	}
	kinds := map[string]int{}
	for k, gs := range byKey {
		sort.Slice(gs, func(i, j int) bool { return gs[i].token < gs[j].token })
		for i := 1; i < len(gs); i++ {
			require.NotEqual(t, gs[i-1].token, gs[i].token, "token %d granted twice for %s", gs[i].token, k)
		}
		for j, g := range gs {
			kinds[g.who]++
			if g.takeover {
				continue
			}
			// Every earlier grant back to the last takeover must have
			// stopped trusting its lease before g's reply came back (g
			// committed before that).
			for i := j - 1; i >= 0; i-- {
				p := gs[i]
				end := p.end()
				require.False(t, end.After(g.returned),
					"%s: %s (token %d) trusted its grant until %s after %s's acquire (token %d) returned",
					k, p.who, p.token, end.Sub(g.returned), g.who, g.token)
				if p.takeover {
					break
				}
			}
		}
		var last int64
		require.NoError(t, e.raw.QueryRow(bg(), fmt.Sprintf(`SELECT fence_token FROM %q.fencekit_leases WHERE account_id=$1 AND session_id=$2`, e.schema),
			k.AccountID, k.SessionID).Scan(&last))
		// Larger when a grant committed but its reply was lost (a stall).
		require.GreaterOrEqual(t, last, gs[len(gs)-1].token, "the row of %s carries the largest token granted", k)
	}
	t.Logf("%d grants: %v", len(grants), kinds)
	for _, who := range []string{"new0", "new1", "new2", "old0", "old1"} {
		require.Positive(t, kinds[who], "%s was never granted a key", who)
	}
}
