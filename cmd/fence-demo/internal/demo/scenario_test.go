package demo_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/cmd/fence-demo/internal/demo"
)

// find returns the events matching pred.
func find(evs []demo.Event, pred func(demo.Event) bool) []demo.Event {
	var out []demo.Event
	for _, e := range evs {
		if pred(e) {
			out = append(out, e)
		}
	}
	return out
}

func one(t *testing.T, evs []demo.Event, what string, pred func(demo.Event) bool) demo.Event {
	t.Helper()
	got := find(evs, pred)
	require.Len(t, got, 1, "exactly one event: %s", what)
	return got[0]
}

// TestScenarioEndToEnd runs the scenario against the real services and
// asserts its outcome from the structured events and the checks.
func TestScenarioEndToEnd(t *testing.T) {
	conn := services(t)
	var jsonl bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := demo.RunScenario(ctx, demo.ScenarioConfig{Conn: conn, Sink: demo.JSONPrinter{W: &jsonl}.Print})
	require.NoError(t, err)
	for _, c := range res.Checks {
		require.True(t, c.OK, "check %q: %s", c.Name, c.Detail)
	}
	require.GreaterOrEqual(t, len(res.Checks), 20)
	ev := res.Events
	ta, tb := int64(res.TokenA), int64(res.TokenB)
	require.Greater(t, tb, ta)
	require.NotEqual(t, res.RunA, res.RunB)

	acqA := one(t, ev, "A acquires", func(e demo.Event) bool {
		return e.Actor == demo.ActorA && e.Kind == demo.KindAcquire
	})
	require.Equal(t, demo.OK, acqA.Outcome)
	require.Equal(t, ta, acqA.Token)
	require.Equal(t, res.RunA.String(), acqA.RunID)

	stall := one(t, ev, "stall", func(e demo.Event) bool { return e.Kind == demo.KindStall })
	heal := one(t, ev, "heal", func(e demo.Event) bool { return e.Kind == demo.KindHeal })
	ttl := demo.DefaultTTL
	require.Greater(t, heal.At-stall.At, ttl, "A stalls longer than its TTL")

	end := one(t, ev, "A's lease ends", func(e demo.Event) bool { return e.Kind == demo.KindLeaseEnd && e.Actor == demo.ActorA })
	require.Equal(t, demo.ActorA, end.Actor)
	require.Equal(t, demo.Lost, end.Outcome)
	require.Greater(t, end.At, stall.At)
	require.Less(t, end.At, heal.At, "A's context ended during the stall")
	require.GreaterOrEqual(t, end.At, end.Until, "not before its trust deadline")

	acqB := one(t, ev, "B acquires", func(e demo.Event) bool {
		return e.Actor == demo.ActorB && e.Kind == demo.KindAcquire
	})
	require.Equal(t, demo.OK, acqB.Outcome)
	require.Equal(t, tb, acqB.Token)
	require.Greater(t, acqB.At, end.At)

	for _, store := range []string{"s3", "pg"} {
		wb := one(t, ev, "B writes "+store, func(e demo.Event) bool {
			return e.Actor == demo.ActorB && e.Kind == demo.KindWrite && e.Store == store
		})
		require.Equal(t, demo.OK, wb.Outcome)
		require.Equal(t, tb, wb.Token)

		sent := one(t, ev, "A sends "+store, func(e demo.Event) bool {
			return e.Actor == demo.ActorA && e.Kind == demo.KindWriteSent && e.Store == store
		})
		wa := one(t, ev, "A's write "+store, func(e demo.Event) bool {
			return e.Actor == demo.ActorA && e.Kind == demo.KindWrite && e.Store == store
		})
		require.Equal(t, demo.Stale, wa.Outcome, wa.Cause)
		require.Equal(t, ta, wa.Presented)
		require.Equal(t, tb, wa.Highest)
		require.Less(t, sent.At, end.At, "A's write left before its lease ended")
		require.Greater(t, wa.At, heal.At, "and was answered only after the network healed")
		require.Greater(t, wa.At, wb.At, "after B's accepted write")
	}

	retry := one(t, ev, "retry", func(e demo.Event) bool {
		return e.Actor == demo.ActorRetry && e.Kind == demo.KindAcquire
	})
	require.Equal(t, demo.Held, retry.Outcome)
	require.Equal(t, tb, retry.Token)
	require.Equal(t, res.RunB.String(), retry.RunID)

	intr := one(t, ev, "intruder", func(e demo.Event) bool {
		return e.Actor == demo.ActorIntrude && e.Kind == demo.KindAcquire
	})
	require.Equal(t, demo.Unauthorized, intr.Outcome)
	require.Zero(t, intr.Token)

	lateRenew := one(t, ev, "A's late renewal", func(e demo.Event) bool {
		return e.Actor == demo.ActorA && e.Kind == demo.KindRenew && e.At > heal.At
	})
	require.Equal(t, demo.Lost, lateRenew.Outcome)
	lateRel := one(t, ev, "A's late release", func(e demo.Event) bool {
		return e.Actor == demo.ActorA && e.Kind == demo.KindRelease
	})
	require.Equal(t, demo.Lost, lateRel.Outcome)
	require.Equal(t, "not-holder", lateRel.Status)

	for _, a := range []demo.Actor{demo.ActorA, demo.ActorB} {
		rc := one(t, ev, "reconcile", func(e demo.Event) bool { return e.Actor == a && e.Kind == demo.KindReconcile })
		require.Equal(t, "held", rc.Status)
		require.Equal(t, res.RunB.String(), rc.RunID, "%s sees B as the owner", a)
		require.Equal(t, tb, rc.Token)
	}
	relB := one(t, ev, "B releases", func(e demo.Event) bool { return e.Actor == demo.ActorB && e.Kind == demo.KindRelease })
	require.Equal(t, "released", relB.Status)

	// Scene 2: the browser's run D takes over the desktop's live run C.
	tc, td := int64(res.TokenC), int64(res.TokenD)
	require.Greater(t, tc, tb)
	require.Greater(t, td, tc)
	acqC := one(t, ev, "C acquires", func(e demo.Event) bool { return e.Actor == demo.ActorC && e.Kind == demo.KindAcquire })
	require.Equal(t, demo.OK, acqC.Outcome)
	require.Equal(t, tc, acqC.Token)
	require.Greater(t, acqC.At, relB.At)
	tko := one(t, ev, "D takes over", func(e demo.Event) bool { return e.Actor == demo.ActorD && e.Kind == demo.KindTakeover })
	require.Equal(t, demo.OK, tko.Outcome)
	require.Equal(t, td, tko.Token)
	require.Equal(t, res.RunD.String(), tko.RunID)
	endC := one(t, ev, "C's lease ends", func(e demo.Event) bool { return e.Actor == demo.ActorC && e.Kind == demo.KindLeaseEnd })
	require.Equal(t, demo.Lost, endC.Outcome)
	require.Equal(t, "lease: taken over by another run", endC.Cause)
	for _, store := range []string{"s3", "pg"} {
		wd := one(t, ev, "D writes "+store, func(e demo.Event) bool {
			return e.Actor == demo.ActorD && e.Kind == demo.KindWrite && e.Store == store
		})
		require.Equal(t, demo.OK, wd.Outcome)
		require.Equal(t, td, wd.Token)
		wc := one(t, ev, "C's write "+store, func(e demo.Event) bool {
			return e.Actor == demo.ActorC && e.Kind == demo.KindWrite && e.Store == store
		})
		require.Equal(t, demo.Stale, wc.Outcome, wc.Cause)
		require.Equal(t, tc, wc.Presented)
		require.Equal(t, td, wc.Highest)
		require.Greater(t, wc.At, wd.At, "refused after D's accepted write")
		require.Greater(t, wc.At, endC.At, "sent after C's context ended: it kept the claim, not the cancellation")
	}
	renC := one(t, ev, "C's renewal", func(e demo.Event) bool { return e.Actor == demo.ActorC && e.Kind == demo.KindRenew && e.At > tko.At })
	require.Equal(t, demo.Lost, renC.Outcome)
	relC := one(t, ev, "C's release", func(e demo.Event) bool { return e.Actor == demo.ActorC && e.Kind == demo.KindRelease })
	require.Equal(t, "not-holder", relC.Status)
	for _, a := range []demo.Actor{demo.ActorC, demo.ActorD} {
		rc := one(t, ev, "reconcile", func(e demo.Event) bool { return e.Actor == a && e.Kind == demo.KindReconcile })
		require.Equal(t, res.RunD.String(), rc.RunID, "%s sees D as the owner", a)
	}
	relD := one(t, ev, "D releases", func(e demo.Event) bool { return e.Actor == demo.ActorD && e.Kind == demo.KindRelease })
	require.Equal(t, "released", relD.Status)
	require.Empty(t, find(ev, func(e demo.Event) bool { return e.Outcome == demo.Failed }))

	// --json: one object per event and line, reading back to the events.
	sc := bufio.NewScanner(&jsonl)
	var back []demo.Event
	for sc.Scan() {
		var e demo.Event
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e), sc.Text())
		back = append(back, e)
	}
	require.Len(t, back, len(ev))
	for i := range ev {
		require.Equal(t, ev[i].Seq, back[i].Seq)
		require.Equal(t, ev[i].Kind, back[i].Kind)
		require.Equal(t, ev[i].Outcome, back[i].Outcome)
		require.Equal(t, ev[i].Token, back[i].Token)
		require.InDelta(t, ev[i].At, back[i].At, float64(time.Microsecond))
	}

	// The picture of this run parses as XML and draws both runs.
	svg, err := demo.RenderSVG(res)
	require.NoError(t, err)
	requireXML(t, svg)
	require.Contains(t, string(svg), "run B · token")
}

func requireXML(t *testing.T, b []byte) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	n := 0
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		n++
	}
	require.Greater(t, n, 50)
}

// TestMainRunTwice runs the CLI's default command twice against the same
// schema and bucket: leftovers of the first run must not break the second.
func TestMainRunTwice(t *testing.T) {
	conn := services(t)
	dir := t.TempDir()
	first := run(t, append(connArgs(conn), "--color", "never")...)
	require.Equal(t, demo.ExitOK, first.code, first.stderr+first.stdout)
	require.NotContains(t, first.stdout, "\x1b[", "no colour when told never")
	svg := filepath.Join(dir, "t.svg")
	second := run(t, append([]string{"run", "--json", "--timeline", svg}, connArgs(conn)...)...)
	require.Equal(t, demo.ExitOK, second.code, second.stderr)
	lines := bytes.Split(bytes.TrimSpace([]byte(second.stdout)), []byte("\n"))
	require.Greater(t, len(lines), 20)
	for _, l := range lines {
		var e demo.Event
		require.NoError(t, json.Unmarshal(l, &e), string(l))
		require.NotEqual(t, demo.Failed, e.Outcome, string(l))
	}
	b, err := os.ReadFile(svg)
	require.NoError(t, err)
	requireXML(t, b)
}

func TestRenderSVGNeedsARun(t *testing.T) {
	_, err := demo.RenderSVG(&demo.Result{})
	require.Error(t, err)
}

// TestScenarioCheckFails writes a row behind the guard's back before the
// end-state checks: the table check must fail, RunScenario must return a
// *CheckError and the exit code must be ExitFailed.
func TestScenarioCheckFails(t *testing.T) {
	conn := services(t)
	cfg := demo.ScenarioConfig{Conn: conn}
	demo.SetBeforeEnd(&cfg, func(ctx context.Context, pool *pgxpool.Pool, table string, res *demo.Result) error {
		_, err := pool.Exec(ctx, `INSERT INTO `+table+` (resource, token, run_id, writer, body) VALUES ($1, $2, $3, 'rogue', 'unguarded')`,
			res.PGResource, int64(res.TokenA), res.RunA)
		return err
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := demo.RunScenario(ctx, cfg)
	var ce *demo.CheckError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, demo.ExitFailed, demo.ExitCode(err))
	var failed []string
	for _, c := range res.Checks {
		if !c.OK {
			failed = append(failed, c.Name)
		}
	}
	require.Equal(t, []string{"the table holds exactly B's and D's rows"}, failed)
	require.Len(t, ce.Failed, 1)
	last := find(res.Events, func(e demo.Event) bool { return e.Kind == demo.KindCheck && e.Outcome == demo.Failed })
	require.Len(t, last, 1, "the failed check is an event too")
}
