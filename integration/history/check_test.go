package history

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
)

// ms is a monotonic instant n milliseconds after an arbitrary origin.
func ms(n int) int64 { return int64(n) * int64(time.Millisecond) }

// hist builds hand-made histories. Times are milliseconds.
type hist struct {
	events []Event
	op     int64
}

func (h *hist) add(e Event) *hist {
	e.Seq = int64(len(h.events) + 1)
	h.events = append(h.events, e)
	return h
}

func (h *hist) grant(exec, key string, tok fence.Token, sent, recv, deadline int) *hist {
	return h.add(Event{Kind: AcquireGranted, Exec: exec, Key: key, Token: tok, RunID: exec + "-" + tok.String(),
		Sent: ms(sent), Mono: ms(recv), Deadline: ms(deadline)})
}

func (h *hist) refused(exec, key string, at int) *hist {
	return h.add(Event{Kind: AcquireRefused, Exec: exec, Key: key, Sent: ms(at), Mono: ms(at + 1)})
}

func (h *hist) renew(exec, key string, tok fence.Token, sent, recv, deadline int) *hist {
	return h.add(Event{Kind: RenewOK, Exec: exec, Key: key, Token: tok, RunID: exec + "-" + tok.String(),
		Sent: ms(sent), Mono: ms(recv), Deadline: ms(deadline)})
}

func (h *hist) loss(exec, key string, tok fence.Token, at int, cause string) *hist {
	return h.add(Event{Kind: Loss, Exec: exec, Key: key, Token: tok, RunID: exec + "-" + tok.String(), Mono: ms(at), Cause: cause})
}

func (h *hist) release(exec, key string, tok fence.Token, at int) *hist {
	return h.add(Event{Kind: Release, Exec: exec, Key: key, Token: tok, RunID: exec + "-" + tok.String(), Mono: ms(at)})
}

func (h *hist) work(exec, key string, tok fence.Token, at int) *hist {
	return h.add(Event{Kind: Work, Exec: exec, Key: key, Token: tok, RunID: exec + "-" + tok.String(), Mono: ms(at)})
}

func (h *hist) write(exec, res string, tok fence.Token, value string, invoke, complete int, o Outcome) *hist {
	h.op++
	h.add(Event{Kind: WriteInvoke, Exec: exec, Resource: res, Guard: "mem", Token: tok, Value: value, Op: h.op, Mono: ms(invoke)})
	if complete < 0 {
		return h // never completed (the process died)
	}
	return h.add(Event{Kind: WriteComplete, Exec: exec, Resource: res, Guard: "mem", Token: tok, Value: value, Op: h.op, Mono: ms(complete), Outcome: o})
}

func (h *hist) final(res string, tok fence.Token, value string, at int) *hist {
	return h.add(Event{Kind: Final, Exec: "checker", Resource: res, Token: tok, Value: value, Mono: ms(at)})
}

// handover is a clean history: A holds k, renews, writes and releases;
// B is refused while A holds it, takes over, writes; A's late write is
// refused as stale.
func handover() *hist {
	h := &hist{}
	h.grant("A", "k", 5, 0, 10, 1000).
		work("A", "k", 5, 20).
		write("A", "r", 5, "a1", 30, 60, Accepted).
		renew("A", "k", 5, 500, 510, 1500).
		work("A", "k", 5, 1100).
		refused("B", "k", 800).
		write("A", "r", 5, "a2", 1110, 1150, Accepted).
		release("A", "k", 5, 1200).
		loss("A", "k", 5, 1201, "released").
		grant("B", "k", 6, 1210, 1220, 2200).
		work("B", "k", 6, 1230).
		write("B", "r", 6, "b1", 1240, 1260, Accepted).
		write("A", "r", 5, "a3", 1300, 1320, Stale).
		final("r", 6, "b1", 3000)
	return h
}

func requireClean(t *testing.T, h *hist, opts Options) *Report {
	t.Helper()
	rep := Check(h.events, opts)
	require.True(t, rep.OK(), "clean history reported:\n%s", rep)
	return rep
}

func requireCaught(t *testing.T, h *hist, kind ViolationKind, opts Options) Violation {
	t.Helper()
	rep := Check(h.events, opts)
	require.False(t, rep.OK(), "violation %s not caught", kind)
	require.Equal(t, map[ViolationKind]int{kind: rep.Counts[kind]}, rep.Counts, "only %s expected:\n%s", kind, rep)
	v := rep.Violations[0]
	require.NotEmpty(t, v.Events, "a violation must name its events")
	s := v.String()
	assert.Contains(t, s, "VIOLATION "+string(kind))
	for _, e := range v.Events {
		assert.Contains(t, s, fmt.Sprintf("#%d ", e.Seq), "event %v missing from report", e)
	}
	t.Logf("caught as expected:\n%s", rep)
	return v
}

func TestCleanHistories(t *testing.T) {
	t.Run("handover", func(t *testing.T) {
		rep := requireClean(t, handover(), Options{})
		assert.Equal(t, 2, rep.Stats.Grants)
		assert.Equal(t, 1, rep.Stats.Refusals)
		assert.Equal(t, 3, rep.Stats.Writes["mem"][Accepted])
		assert.Equal(t, 1, rep.Stats.Writes["mem"][Stale])
		assert.Equal(t, 2, rep.Stats.Executions) // A, B (not the final reader)
	})
	t.Run("concurrent writes out of completion order", func(t *testing.T) {
		// 5 is invoked before 6 completes and completes after it: the two
		// overlap, so no real-time order forbids accepting both.
		h := &hist{}
		h.write("A", "r", 5, "a", 100, 300, Accepted).
			write("B", "r", 6, "b", 150, 200, Accepted).
			final("r", 6, "b", 400)
		requireClean(t, h, Options{})
	})
	t.Run("lost reply that committed", func(t *testing.T) {
		h := &hist{}
		h.write("A", "r", 6, "a", 100, 200, Accepted).
			write("B", "r", 7, "b", 300, 400, Unknown).
			final("r", 7, "b", 500)
		requireClean(t, h, Options{})
	})
	t.Run("write cut short by SIGKILL that committed", func(t *testing.T) {
		h := &hist{}
		h.write("A", "r", 6, "a", 100, 200, Accepted).
			write("B", "r", 7, "b", 300, -1, "").
			final("r", 7, "b", 500)
		rep := requireClean(t, h, Options{})
		assert.Equal(t, 1, rep.Stats.Writes["mem"][Unknown])
	})
	t.Run("lost reply that did not commit", func(t *testing.T) {
		h := &hist{}
		h.write("A", "r", 6, "a", 100, 200, Accepted).
			write("B", "r", 7, "b", 300, 400, Unknown).
			final("r", 6, "a", 500)
		requireClean(t, h, Options{})
	})
	t.Run("same token writes again", func(t *testing.T) {
		h := &hist{}
		h.write("A", "r", 6, "a1", 100, 200, Accepted).
			write("A", "r", 6, "a2", 300, 400, Accepted).
			final("r", 6, "a2", 500)
		requireClean(t, h, Options{})
	})
	t.Run("grants racing, tokens out of reply order", func(t *testing.T) {
		// B's request was sent before A's reply arrived: either order is
		// possible. A's deadline ends before B's grant arrives.
		h := &hist{}
		h.grant("B", "k", 8, 50, 1300, 2300).
			grant("A", "k", 7, 60, 100, 1000)
		requireClean(t, h, Options{})
	})
	t.Run("grant reply arrived after its own deadline", func(t *testing.T) {
		// A's grant arrived too late to be trusted at all; B's grant while
		// A's (empty) belief interval "ran" is fine.
		h := &hist{}
		h.grant("A", "k", 7, 1, 1200, 1000).
			grant("B", "k", 8, 1100, 1150, 2000)
		requireClean(t, h, Options{})
	})
	t.Run("late renewal does not extend belief", func(t *testing.T) {
		// A's renewal reply arrives after its deadline: it does not revive
		// the belief, so B's grant afterwards does not overlap.
		h := &hist{}
		h.grant("A", "k", 7, 0, 10, 1000).
			renew("A", "k", 7, 900, 1050, 1900).
			grant("B", "k", 8, 1100, 1110, 2100)
		requireClean(t, h, Options{})
	})
	t.Run("work within slack after deadline", func(t *testing.T) {
		h := &hist{}
		h.grant("A", "k", 7, 0, 10, 1000).work("A", "k", 7, 1020)
		requireClean(t, h, Options{WorkSlack: 50 * time.Millisecond})
	})
	t.Run("events in shuffled order", func(t *testing.T) {
		h := handover()
		ev := h.events
		for i, j := 0, len(ev)-1; i < j; i, j = i+1, j-1 {
			ev[i], ev[j] = ev[j], ev[i]
		}
		requireClean(t, h, Options{})
	})
}

func TestOverlappingOwnershipCaught(t *testing.T) {
	t.Run("second grant inside first trust window", func(t *testing.T) {
		h := &hist{}
		h.grant("A", "k", 5, 0, 10, 1000).
			grant("B", "k", 6, 890, 900, 1900)
		v := requireCaught(t, h, OverlappingOwnership, Options{})
		assert.Equal(t, "k", v.Subject)
	})
	t.Run("renewal extends into the next grant", func(t *testing.T) {
		h := &hist{}
		h.grant("A", "k", 5, 0, 10, 1000).
			renew("A", "k", 5, 900, 950, 1900).
			grant("B", "k", 6, 1100, 1110, 2100)
		requireCaught(t, h, OverlappingOwnership, Options{})
	})
	t.Run("renewal accepted for a superseded grant", func(t *testing.T) {
		h := &hist{}
		h.grant("A", "k", 5, 0, 10, 1000).
			loss("A", "k", 5, 1000, "trust deadline").
			grant("B", "k", 6, 1100, 1110, 2100).
			renew("A", "k", 5, 1200, 1210, 2200)
		v := requireCaught(t, h, OverlappingOwnership, Options{})
		assert.Contains(t, v.Message, "renewal")
	})
}

func TestOverlapEndedByLossIsClean(t *testing.T) {
	// A's trust deadline is 1000 but it observed the loss (renewal
	// rejected) at 500, before B was granted at 800.
	h := &hist{}
	h.grant("A", "k", 5, 0, 10, 1000).
		add(Event{Kind: RenewRejected, Exec: "A", Key: "k", RunID: "A-5", Token: 5, Sent: ms(480), Mono: ms(490)}).
		loss("A", "k", 5, 500, "renewal rejected").
		grant("B", "k", 6, 790, 800, 1800)
	requireClean(t, h, Options{})
}

func TestStaleAcceptedCaught(t *testing.T) {
	h := &hist{}
	h.write("B", "r", 6, "b", 100, 200, Accepted).
		write("A", "r", 5, "a", 300, 400, Accepted).
		final("r", 6, "b", 500)
	v := requireCaught(t, h, StaleAccepted, Options{})
	assert.Contains(t, v.Message, "token 5 accepted after token 6")
}

func TestFinalStateCaught(t *testing.T) {
	t.Run("older token", func(t *testing.T) {
		h := &hist{}
		h.write("A", "r", 5, "a", 100, 200, Accepted).
			write("B", "r", 6, "b", 300, 400, Accepted).
			final("r", 5, "a", 500)
		requireCaught(t, h, FinalState, Options{})
	})
	t.Run("empty", func(t *testing.T) {
		h := &hist{}
		h.write("A", "r", 5, "a", 100, 200, Accepted).final("r", 0, "", 500)
		requireCaught(t, h, FinalState, Options{})
	})
	t.Run("value nobody wrote", func(t *testing.T) {
		h := &hist{}
		h.write("A", "r", 5, "a", 100, 200, Accepted).final("r", 5, "zzz", 500)
		requireCaught(t, h, FinalState, Options{})
	})
	t.Run("higher token from a refused write", func(t *testing.T) {
		h := &hist{}
		h.write("A", "r", 5, "a", 100, 200, Accepted).
			write("B", "r", 9, "b", 300, 400, Failed).
			final("r", 9, "b", 500)
		requireCaught(t, h, FinalState, Options{})
	})
	t.Run("overwritten by a later write with the same token", func(t *testing.T) {
		h := &hist{}
		h.write("A", "r", 6, "a1", 100, 200, Accepted).
			write("A", "r", 6, "a2", 300, 400, Accepted).
			final("r", 6, "a1", 500)
		requireCaught(t, h, FinalState, Options{})
	})
}

func TestTokenOrderCaught(t *testing.T) {
	t.Run("lower token after a completed grant", func(t *testing.T) {
		h := &hist{}
		h.grant("A", "k", 6, 0, 10, 1000).
			grant("B", "k", 5, 1200, 1210, 2200)
		v := requireCaught(t, h, TokenOrder, Options{})
		assert.Contains(t, v.Message, "token 5, not above token 6")
	})
	t.Run("same token twice", func(t *testing.T) {
		h := &hist{}
		h.grant("A", "k", 6, 0, 10, 1000).
			grant("B", "k", 6, 1200, 1210, 2200)
		requireCaught(t, h, TokenOrder, Options{})
	})
	t.Run("other keys do not count", func(t *testing.T) {
		h := &hist{}
		h.grant("A", "k1", 6, 0, 10, 1000).
			grant("B", "k2", 5, 1200, 1210, 2200)
		requireClean(t, h, Options{})
	})
}

func TestWorkAfterLossCaught(t *testing.T) {
	t.Run("after observed loss", func(t *testing.T) {
		h := &hist{}
		h.grant("A", "k", 5, 0, 10, 1000).
			loss("A", "k", 5, 400, "renewal rejected").
			work("A", "k", 5, 450)
		v := requireCaught(t, h, WorkAfterLoss, Options{})
		assert.Contains(t, v.Message, "observed its lease context end")
	})
	t.Run("after release", func(t *testing.T) {
		h := &hist{}
		h.grant("A", "k", 5, 0, 10, 1000).
			release("A", "k", 5, 400).
			work("A", "k", 5, 450)
		requireCaught(t, h, WorkAfterLoss, Options{})
	})
	t.Run("past deadline beyond slack", func(t *testing.T) {
		h := &hist{}
		h.grant("A", "k", 5, 0, 10, 1000).work("A", "k", 5, 1100)
		v := requireCaught(t, h, WorkAfterLoss, Options{WorkSlack: 50 * time.Millisecond})
		assert.Contains(t, v.Message, "past its trust deadline")
	})
	t.Run("inside another execution's tenure", func(t *testing.T) {
		// A's loss was never observed and its work is within slack of its
		// (renewed) deadline, but B already holds the key.
		h := &hist{}
		h.grant("A", "k", 5, 0, 10, 1000).
			grant("B", "k", 6, 1005, 1010, 2000).
			work("A", "k", 5, 1020)
		rep := Check(h.events, Options{WorkSlack: 50 * time.Millisecond})
		assert.Equal(t, 1, rep.Counts[WorkAfterLoss], "%s", rep)
		assert.Contains(t, rep.String(), "worked while B (token 6) owned the key")
	})
	t.Run("never granted", func(t *testing.T) {
		h := &hist{}
		h.work("A", "k", 5, 100)
		requireCaught(t, h, WorkAfterLoss, Options{})
	})
}

func TestMaxPerKindCountsAll(t *testing.T) {
	h := &hist{}
	h.write("B", "r", 9, "b", 100, 200, Accepted)
	for i := range 15 {
		h.write("A", "r", 5, fmt.Sprintf("a%d", i), 300+10*i, 305+10*i, Accepted)
	}
	rep := Check(h.events, Options{MaxPerKind: 3})
	assert.Equal(t, 15, rep.Counts[StaleAccepted])
	assert.Len(t, rep.Violations, 3)
	assert.Equal(t, 15, rep.Total())
}

func TestRecorderConcurrentAndStream(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	stream := NewStreamRecorder(lockedWriter{&buf, &mu})
	mem := NewRecorder()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				e := Event{Kind: Work, Exec: fmt.Sprintf("g%d", g), Op: int64(i)}
				mem.Record(e)
				stream.Record(e)
			}
		}()
	}
	wg.Wait()
	evs := mem.Events()
	require.Len(t, evs, 800)
	for i, e := range evs {
		assert.Equal(t, int64(i+1), e.Seq)
		assert.NotZero(t, e.Mono)
	}
	// A killed writer leaves a truncated last line: ignored.
	buf.WriteString(`{"seq":801,"kind":"wo`)
	got, err := Decode(&buf)
	require.NoError(t, err)
	require.Len(t, got, 800)
	merged := NewRecorder()
	merged.Merge(got...)
	assert.Len(t, merged.Events(), 800)

	_, err = Decode(strings.NewReader("garbage\n{}\n"))
	assert.Error(t, err, "a malformed line in the middle is an error")
}

type lockedWriter struct {
	b  *bytes.Buffer
	mu *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func TestClock(t *testing.T) {
	a := Now()
	b := Now()
	assert.LessOrEqual(t, a, b)
	d := time.Now().Add(time.Second)
	m := MonoOf(d)
	assert.InDelta(t, float64(Now()+int64(time.Second)), float64(m), float64(50*time.Millisecond))
}

func TestWorkStepRevealsBackgroundRenewal(t *testing.T) {
	// A's lease renewed itself in the background (no RenewOK recorded); a
	// work step at 900 reports the extended deadline 1900, so B's grant at
	// 1100 overlaps A's belief.
	h := &hist{}
	h.grant("A", "k", 5, 1, 10, 1000).
		add(Event{Kind: Work, Exec: "A", Key: "k", Token: 5, RunID: "A-5", Mono: ms(900), Deadline: ms(1900)}).
		grant("B", "k", 6, 1090, 1100, 2100)
	v := requireCaught(t, h, OverlappingOwnership, Options{})
	assert.Contains(t, v.Message, "until 1.900s")
}
