package effects_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/effects"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/internal/syncbuf"
	"github.com/fencekit/fencekit/lease"
)

// childEnv makes the test binary a relay process (relayChild) instead of
// running tests: the value is "schema|url-of-nothing".
const childEnv = "FENCEKIT_EFFECTS_RELAY_CHILD"

// crashEnv makes the relay child SIGKILL itself at a crash point: "claim"
// (after its claim committed, before the send) or "send" (after the
// target answered, before the outcome is written).
const crashEnv = "FENCEKIT_EFFECTS_RELAY_CRASH"

// claimForEnv sets the relay child's ClaimFor (default 300ms). Its sends
// are bounded by 0.9 of it, so a test that needs the child's send to reach
// the target on a loaded machine gives it longer.
const claimForEnv = "FENCEKIT_EFFECTS_RELAY_CLAIM_FOR"

// relayChild runs one relay with two targets over schema until killed:
// "pay" (idempotent HTTP) and "once" (at-most-once HTTP).
func relayChild() int {
	schema := os.Getenv(childEnv)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, fencetest.DatabaseURL())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	o, err := effects.New(effects.Config{Pool: pool, Schema: schema, Targets: chaosTargets()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	claimFor := 300 * time.Millisecond
	if d, err := time.ParseDuration(os.Getenv(claimForEnv)); err == nil {
		claimFor = d
	}
	r, err := effects.NewRelay(o, effects.RelayConfig{ClaimFor: claimFor, Poll: 20 * time.Millisecond,
		RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond, Batch: 4})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	die := func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) }
	switch os.Getenv(crashEnv) {
	case "claim":
		effects.SetHooks(r, func(uuid.UUID, int64) { die() }, nil)
	case "send":
		effects.SetHooks(r, nil, func(uuid.UUID, int64) bool { die(); return true })
	}
	if err := r.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("relay started")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	<-sig
	_ = r.Stop()
	return 0
}

func chaosTargets() []effects.Target {
	return []effects.Target{
		{Name: "pay", Deliverer: &effects.HTTP{}},
		{Name: "once", Deliverer: &effects.HTTP{}, AtMostOnce: true},
	}
}

// Property 9: relays killed with SIGKILL at arbitrary points (while the
// target delays its answers, so many kills land between send and outcome):
// every effect ends final, an idempotent target gets identical copies of
// each request and applies each effect once, and an at-most-once target
// gets each effect at most once (exactly once when delivered).
func TestChaosKilledRelays(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t)
	tg.delay.Store(int64(30 * time.Millisecond))
	o := e.outbox(chaosTargets()...)
	l, err := e.manager().Acquire(bg(), e.key())
	require.NoError(t, err)
	const n = 24
	var ids []string
	for i := range n {
		ef := tg.effect(t, fmt.Sprintf("c%d", i), fmt.Sprintf(`{"i":%d}`, i))
		if i%2 == 1 {
			ef.Target = "once"
		}
		id, err := o.Record(l.Context(), ef)
		require.NoError(t, err)
		ids = append(ids, id.String())
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	kills := 0
	for round := 0; round < 40; round++ {
		s, err := o.Stats(bg())
		require.NoError(t, err)
		if s.ByState[effects.StatePending]+s.ByState[effects.StateSending] == 0 {
			break
		}
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+e.schema)
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		buf := make([]byte, 64)
		m, _ := out.Read(buf) // "relay started"
		require.True(t, strings.HasPrefix(string(buf[:m]), "relay started"), "child: %q", buf[:m])
		// Kill it after it sent a few requests (mid-delivery: the target
		// delays every answer).
		before := tg.total()
		deadline := time.After(5 * time.Second)
	wait:
		for tg.total() < before+1+round%3 {
			select {
			case <-tg.seen:
			case <-deadline:
				break wait
			}
		}
		require.NoError(t, cmd.Process.Kill())
		_ = cmd.Wait()
		kills++
	}
	// A last relay in this process finishes what the claims of the killed
	// ones left.
	e.relay(chaosTargets(), effects.RelayConfig{ClaimFor: 300 * time.Millisecond})
	for i, id := range ids {
		in, err := o.Await(bg(), uuidMust(t, id))
		require.NoError(t, err)
		reqs := tg.requests(effects.IdempotencyKey(in.ID))
		if i%2 == 1 {
			require.LessOrEqual(t, len(reqs), 1, "at-most-once effect %s sent %d times", id, len(reqs))
			require.Contains(t, []effects.State{effects.StateDelivered, effects.StateAmbiguous}, in.State)
			if in.State == effects.StateDelivered {
				require.Len(t, reqs, 1)
			}
			continue
		}
		require.Equal(t, effects.StateDelivered, in.State)
		require.NotEmpty(t, reqs)
		for _, r := range reqs {
			require.Equal(t, reqs[0].Body, r.Body)
		}
	}
	t.Logf("%d relay processes killed with SIGKILL; %d requests reached the target", kills, tg.total())
}

// producerEnv makes the test binary a producer process (producerChild):
// the value is "schema|account|session|target URL".
const producerEnv = "FENCEKIT_EFFECTS_PRODUCER_CHILD"

// producerTTL is the child's lease TTL: the parent stops it for longer.
const producerTTL = 500 * time.Millisecond

// producerChild acquires the lease key, records one effect while it holds
// it ("before <id>"), opens a transaction and says "ready", then waits for
// a line on stdin. The parent stops it (SIGSTOP) past its TTL, lets
// another run take the key, and continues it (SIGCONT); the child then
// records three effects as a paused producer would, without noticing it
// was displaced: in its own transaction under the claim it holds
// (Record, a fresh context carrying that claim), in the transaction it
// opened before the stop (RecordTx, the same context), and with the lease's context (Record). It prints
// one line per call: "<name> ok <id>", "<name> stale" or "<name> err
// <message>".
func producerChild() int {
	parts := strings.Split(os.Getenv(producerEnv), "|")
	if len(parts) != 4 {
		fmt.Fprintln(os.Stderr, "bad", producerEnv)
		return 1
	}
	schema, key, url := parts[0], lease.Key{AccountID: parts[1], SessionID: parts[2]}, parts[3]
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, fencetest.DatabaseURL())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pool.Close()
	m, err := lease.New(lease.Config{Pool: pool, Schema: schema, TTL: producerTTL})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = m.Close() }()
	o, err := effects.New(effects.Config{Pool: pool, Schema: schema, Targets: []effects.Target{httpTarget()}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	l, err := m.Acquire(ctx, key)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	claim, err := fence.ClaimFromContext(l.Context())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	eff := func(name string) effects.Effect {
		b, err := effects.HTTPRequest{Method: "POST", URL: url + "/charge", Body: []byte(`{"from":"` + name + `"}`)}.Freeze()
		if err != nil {
			panic(err)
		}
		return effects.Effect{Target: "pay", RequestKey: name, Request: b}
	}
	report := func(name string, id uuid.UUID, err error) {
		switch {
		case err == nil:
			fmt.Printf("%s ok %s\n", name, id)
		case errors.Is(err, fence.ErrStale):
			fmt.Printf("%s stale\n", name)
		default:
			fmt.Printf("%s err %s\n", name, strings.ReplaceAll(err.Error(), "\n", " "))
		}
	}
	id, err := o.Record(l.Context(), eff("before"))
	report("before", id, err)
	tx, err := pool.Begin(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Continued: a paused producer that has not noticed anything.
	id, err = o.Record(fence.WithClaim(ctx, claim), eff("after-own-tx"))
	report("after-own-tx", id, err)
	id, err = o.RecordTx(fence.WithClaim(ctx, claim), tx, eff("after-open-tx"))
	if err == nil {
		err = tx.Commit(ctx)
	}
	report("after-open-tx", id, err)
	id, err = o.Record(l.Context(), eff("after-lease-ctx"))
	report("after-lease-ctx", id, err)
	return 0
}

// Property 2: a producer process stopped (SIGSTOP) past its lease TTL,
// while another run acquires the key and records, then continued
// (SIGCONT): each of its records is refused with fence.ErrStale (the two
// under its claim on a fresh context; the one with the lease's context is
// refused too, as stale or because the lease ended), no row of it exists,
// and the target receives nothing of it, while the effects recorded by
// the holders of the time are delivered.
func TestChaosStoppedProducer(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t)
	o := e.outbox(httpTarget())
	key := e.key()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), producerEnv+"="+strings.Join([]string{e.schema, key.AccountID, key.SessionID, tg.srv.URL}, "|"))
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr syncbuf.Buffer // written by exec's copying goroutine, read in a failure message
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	stopped := false
	t.Cleanup(func() {
		if stopped {
			_ = cmd.Process.Signal(syscall.SIGCONT)
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := bufio.NewScanner(stdout)
	next := func() string {
		t.Helper()
		require.True(t, lines.Scan(), "child ended early: %v; stderr: %s", lines.Err(), stderr.String())
		return lines.Text()
	}
	before := next()
	require.True(t, strings.HasPrefix(before, "before ok "), "child: %q", before)
	beforeID := uuidMust(t, strings.TrimPrefix(before, "before ok "))
	require.Equal(t, "ready", next())

	require.NoError(t, cmd.Process.Signal(syscall.SIGSTOP))
	stopped = true
	_, err = io.WriteString(stdin, "go\n") // read once continued
	require.NoError(t, err)
	// The child's lease expires in the database (no renewal while
	// stopped); another run takes the key and records.
	m := e.manager()
	var l2 *lease.Lease
	eventually(t, 10*producerTTL+5*time.Second, func() bool {
		l, err := m.Acquire(bg(), key)
		if err != nil {
			require.ErrorIs(t, err, lease.ErrHeld)
			return false
		}
		l2 = l
		return true
	}, "the stopped producer's lease did not expire")
	newID, err := o.Record(l2.Context(), tg.effect(t, "new-holder", `{"from":"new-holder"}`))
	require.NoError(t, err)

	require.NoError(t, cmd.Process.Signal(syscall.SIGCONT))
	stopped = false
	for _, name := range []string{"after-own-tx", "after-open-tx"} {
		require.Equal(t, name+" stale", next(), "a displaced producer's record must be refused as stale")
	}
	last := next()
	require.True(t, last == "after-lease-ctx stale" || strings.HasPrefix(last, "after-lease-ctx err "), "child: %q", last)
	require.NoError(t, cmd.Wait())

	// Only the two effects of the holders of the time exist; a relay
	// delivers them and nothing else.
	require.Equal(t, 2, e.count())
	e.relay([]effects.Target{httpTarget()}, effects.RelayConfig{})
	for _, id := range []uuid.UUID{beforeID, newID} {
		in, err := o.Await(bg(), id)
		require.NoError(t, err)
		require.Equal(t, effects.StateDelivered, in.State)
	}
	s, err := o.Stats(bg())
	require.NoError(t, err)
	require.Zero(t, s.ByState[effects.StatePending]+s.ByState[effects.StateSending])
	tg.mu.Lock()
	defer tg.mu.Unlock()
	require.Len(t, tg.reqs, 2)
	for _, r := range tg.reqs {
		require.NotContains(t, r.Body, `"after`, "a displaced producer's effect reached the target")
	}
}

// Property 9, point by point: a relay process killed with SIGKILL after
// its claim (before the send), after the send (before the outcome) and
// after the outcome, for an idempotent and an at-most-once target. A relay
// in this process then finishes: the idempotent effect is delivered, every
// copy with the same bytes and key (the target's dedup applies it once);
// the at-most-once effect is received
// at most once and, when its send may have happened, ends ambiguous.
func TestChaosRelayKilledAtEachCrashPoint(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	cases := []struct {
		point, target string
		sends         int           // requests the target receives in all
		state         effects.State // final state
	}{
		{"claim", "pay", 1, effects.StateDelivered},
		{"send", "pay", 2, effects.StateDelivered},
		{"outcome", "pay", 1, effects.StateDelivered},
		{"claim", "once", 0, effects.StateAmbiguous},
		{"send", "once", 1, effects.StateAmbiguous},
		{"outcome", "once", 1, effects.StateDelivered},
	}
	for _, tc := range cases {
		t.Run(tc.point+"/"+tc.target, func(t *testing.T) {
			e := newEnv(t)
			tg := newTarget(t)
			o := e.outbox(chaosTargets()...)
			l, err := e.manager().Acquire(bg(), e.key())
			require.NoError(t, err)
			ef := tg.effect(t, "k", `{"amount":7}`)
			ef.Target = tc.target
			id, err := o.Record(l.Context(), ef)
			require.NoError(t, err)

			cmd := exec.Command(exe, "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"="+e.schema, claimForEnv+"=3s")
			if tc.point != "outcome" {
				cmd.Env = append(cmd.Env, crashEnv+"="+tc.point)
			}
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			if tc.point == "outcome" {
				eventually(t, 10*time.Second, func() bool {
					in, err := o.Get(bg(), id)
					require.NoError(t, err)
					return in.State.Final()
				}, "the child relay wrote no outcome")
				require.NoError(t, cmd.Process.Kill())
			}
			err = cmd.Wait()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, "the child relay was not killed")
			ws, ok := ee.Sys().(syscall.WaitStatus)
			require.True(t, ok)
			require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "child: %v", err)

			e.relay(chaosTargets(), effects.RelayConfig{ClaimFor: 300 * time.Millisecond})
			in, err := o.Await(bg(), id)
			require.NoError(t, err)
			require.Equal(t, tc.state, in.State, "detail: %s", in.Detail)
			reqs := tg.requests(effects.IdempotencyKey(id))
			require.Len(t, reqs, tc.sends)
			for _, r := range reqs {
				require.Equal(t, reqs[0].Body, r.Body)
			}
		})
	}
}
