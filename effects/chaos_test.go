package effects_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/effects"
	"github.com/fencekit/fencekit/fencetest"
)

// childEnv makes the test binary a relay process (relayChild) instead of
// running tests: the value is "schema|url-of-nothing".
const childEnv = "FENCEKIT_EFFECTS_RELAY_CHILD"

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
	r, err := effects.NewRelay(o, effects.RelayConfig{ClaimFor: 300 * time.Millisecond, Poll: 20 * time.Millisecond,
		RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond, Batch: 4})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
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
