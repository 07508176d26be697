package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/internal/traceoutcome"
	"github.com/fencekit/fencekit/lease/leasetrace"
)

// spans is an in-memory trace pipeline: every span ends in the recorder
// synchronously.
type spans struct {
	t  *testing.T
	tp *sdktrace.TracerProvider
	sr *tracetest.SpanRecorder
}

func newSpans(t *testing.T) *spans {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return &spans{t: t, tp: tp, sr: sr}
}

// named returns the ended spans called name, oldest first.
func (s *spans) named(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, sp := range s.sr.Ended() {
		if sp.Name() == name {
			out = append(out, sp)
		}
	}
	return out
}

// await waits until a span called name has ended.
func (s *spans) await(name string) {
	s.t.Helper()
	waitFor(s.t, 5*time.Second, "span "+name, func() bool { return len(s.named(name)) > 0 })
}

// one returns the only ended span called name.
func (s *spans) one(name string) sdktrace.ReadOnlySpan {
	s.t.Helper()
	got := s.named(name)
	require.Len(s.t, got, 1, "spans named %s", name)
	return got[0]
}

// attrs returns a span's attributes as strings.
func attrs(sp sdktrace.ReadOnlySpan) map[string]string {
	out := map[string]string{}
	for _, kv := range sp.Attributes() {
		out[string(kv.Key)] = kv.Value.String()
	}
	return out
}

// requireChild checks that sp is a child of parent.
func requireChild(t *testing.T, sp sdktrace.ReadOnlySpan, parent trace.SpanContext) {
	t.Helper()
	require.Equal(t, parent.TraceID(), sp.SpanContext().TraceID(), "%s: trace", sp.Name())
	require.Equal(t, parent.SpanID(), sp.Parent().SpanID(), "%s: parent", sp.Name())
}

// TestTraceGrantHeldTakeoverRelease: Acquire, a held refusal, Takeover,
// the displaced lease's loss and Release each record their span with the
// key, run id, token and outcome, as children of the caller's span; a
// refusal is an outcome (status Unset), the loss a failure (status Error).
func TestTraceGrantHeldTakeoverRelease(t *testing.T) {
	e := newEnv(t)
	s := newSpans(t)
	m := e.manager(lease.Config{TracerProvider: s.tp})
	other := e.manager(lease.Config{TracerProvider: s.tp})
	ctx, call := s.tp.Tracer("test").Start(bg(), "tool-call")
	caller := call.SpanContext()
	key := uniqueKey(t)

	l, err := m.Acquire(ctx, key, lease.WithHolder("desktop"))
	require.NoError(t, err)
	acq := s.one(leasetrace.SpanAcquire)
	requireChild(t, acq, caller)
	require.Equal(t, map[string]string{
		leasetrace.AttrAccountID: key.AccountID, leasetrace.AttrSessionID: key.SessionID,
		leasetrace.AttrRunID: l.RunID().String(), leasetrace.AttrToken: l.Token().String(),
		leasetrace.AttrHolder: "desktop", leasetrace.AttrOutcome: traceoutcome.OutcomeGranted,
	}, attrs(acq))
	require.Equal(t, codes.Unset, acq.Status().Code)
	require.Equal(t, caller, trace.SpanContextFromContext(l.Context()),
		"the lease's context carries the caller's span, not the ended Acquire span")

	_, err = other.Acquire(ctx, key)
	require.ErrorIs(t, err, lease.ErrHeld)
	held := s.named(leasetrace.SpanAcquire)[1]
	requireChild(t, held, caller)
	a := attrs(held)
	require.Equal(t, traceoutcome.OutcomeHeld, a[leasetrace.AttrOutcome])
	require.Equal(t, l.RunID().String(), a[leasetrace.AttrHeldByRunID])
	require.Equal(t, l.Token().String(), a[leasetrace.AttrHeldByToken])
	require.Empty(t, a[leasetrace.AttrRunID], "no run was granted")
	require.Equal(t, codes.Unset, held.Status().Code, "a refusal is an outcome, not an error")
	require.Empty(t, held.Events(), "no error recorded for a refusal")

	l2, err := other.Takeover(ctx, key)
	require.NoError(t, err)
	tk := s.one(leasetrace.SpanTakeover)
	requireChild(t, tk, caller)
	a = attrs(tk)
	require.Equal(t, traceoutcome.OutcomeGranted, a[leasetrace.AttrOutcome])
	require.Equal(t, l.RunID().String(), a[leasetrace.AttrDisplacedRunID])
	require.Equal(t, l2.Token().String(), a[leasetrace.AttrToken])

	<-l.Done() // told through the listener
	require.ErrorIs(t, l.Err(), lease.ErrTakenOver)
	s.await(leasetrace.SpanLost) // recorded just after the context is cancelled
	lost := s.one(leasetrace.SpanLost)
	requireChild(t, lost, caller) // the displaced run's trace
	a = attrs(lost)
	require.Equal(t, "taken_over", a[leasetrace.AttrCause])
	require.Equal(t, l.RunID().String(), a[leasetrace.AttrRunID])
	require.Equal(t, l.Token().String(), a[leasetrace.AttrToken])
	require.Equal(t, codes.Error, lost.Status().Code)

	res, err := l.Release(ctx)
	require.NoError(t, err)
	require.Equal(t, lease.ReleaseNotHolder, res)
	res, err = other.Release(ctx, key, l2.RunID())
	require.NoError(t, err)
	require.Equal(t, lease.ReleaseDone, res)
	rel := s.named(leasetrace.SpanRelease)
	require.Len(t, rel, 2)
	for i, want := range []struct {
		run, outcome string
	}{{l.RunID().String(), "not-holder"}, {l2.RunID().String(), "released"}} {
		requireChild(t, rel[i], caller)
		a := attrs(rel[i])
		require.Equal(t, want.run, a[leasetrace.AttrRunID])
		require.Equal(t, want.outcome, a[leasetrace.AttrOutcome])
		require.Equal(t, key.AccountID, a[leasetrace.AttrAccountID])
		require.Equal(t, codes.Unset, rel[i].Status().Code)
	}

	// Explicit renewal of a released lease: refused, a failure of the run.
	_, err = other.Renew(ctx, key, l2.RunID())
	require.ErrorIs(t, err, lease.ErrLost)
	rn := s.one(leasetrace.SpanRenew)
	requireChild(t, rn, caller)
	require.Equal(t, traceoutcome.OutcomeLost, attrs(rn)[leasetrace.AttrOutcome])
	require.Equal(t, codes.Error, rn.Status().Code)

	call.End()
}

// TestTraceRenewBatch: each background renewal statement is a root span
// counting its leases: a batched renewal (per-lease mode) or a heartbeat
// (heartbeat mode, which also names its epoch).
func TestTraceRenewBatch(t *testing.T) {
	for _, tc := range []struct {
		mode lease.RenewalMode
		span string
	}{{lease.RenewalPerLease, leasetrace.SpanRenewBatch}, {lease.RenewalHeartbeat, leasetrace.SpanHeartbeat}} {
		t.Run(tc.span, func(t *testing.T) {
			e := newEnv(t)
			s := newSpans(t)
			m := e.manager(lease.Config{TracerProvider: s.tp, Renewal: tc.mode, TTL: time.Second, SafetyMargin: 200 * time.Millisecond, RenewEvery: 250 * time.Millisecond})
			for range 3 {
				_, err := m.Acquire(bg(), uniqueKey(t))
				require.NoError(t, err)
			}
			// A heartbeat carries all 3 leases; per-lease batches carry the
			// leases due together, so on a loaded machine, where the three
			// grants spread over more than a renewer tick, 3 batches of 1.
			want := 3
			if tc.mode == lease.RenewalPerLease {
				want = 1
			}
			waitFor(t, 5*time.Second, fmt.Sprintf("a renewal statement span of %d to 3 leases", want), func() bool {
				for _, sp := range s.named(tc.span) {
					if n, err := strconv.Atoi(attrs(sp)[leasetrace.AttrBatchLeases]); err == nil && n >= want && n <= 3 {
						return true
					}
				}
				return false
			})
			for _, sp := range s.named(tc.span) {
				require.False(t, sp.Parent().IsValid(), "a renewal statement starts its own trace")
				a := attrs(sp)
				if n := a[leasetrace.AttrBatchLeases]; n != "" && n != "0" {
					require.Equal(t, n, a[leasetrace.AttrBatchRenewed])
					require.Equal(t, "0", a[leasetrace.AttrBatchLost])
					require.Equal(t, codes.Unset, sp.Status().Code)
				}
				if tc.mode == lease.RenewalHeartbeat {
					require.NotEmpty(t, a[leasetrace.AttrManagerID], "a heartbeat span names its epoch")
				}
			}
		})
	}
}

// TestTraceRun: Run's span is the parent of its Acquire, of the spans fn
// starts from its ctx, and of its Release; a Run whose lease is taken over
// ends with outcome taken_over and status Error, and the displaced lease's
// loss is recorded in the same trace.
func TestTraceRun(t *testing.T) {
	e := newEnv(t)
	s := newSpans(t)
	m := e.manager(lease.Config{TracerProvider: s.tp})
	other := e.manager(lease.Config{TracerProvider: s.tp})
	tr := s.tp.Tracer("test")

	key := uniqueKey(t)
	require.NoError(t, m.Run(bg(), key, func(ctx context.Context, _ *lease.Lease) error {
		_, work := tr.Start(ctx, "work")
		work.End()
		return nil
	}))
	run := s.one(leasetrace.SpanRun)
	require.False(t, run.Parent().IsValid())
	require.Equal(t, traceoutcome.OutcomeCompleted, attrs(run)[leasetrace.AttrOutcome])
	for _, name := range []string{leasetrace.SpanAcquire, "work", leasetrace.SpanRelease} {
		requireChild(t, s.one(name), run.SpanContext())
	}
	require.Equal(t, attrs(s.one(leasetrace.SpanAcquire))[leasetrace.AttrRunID], attrs(run)[leasetrace.AttrRunID])

	// fn's error: status Error, outcome fn_error.
	boom := errors.New("boom")
	require.ErrorIs(t, m.Run(bg(), uniqueKey(t), func(context.Context, *lease.Lease) error { return boom }), boom)
	runs := s.named(leasetrace.SpanRun)
	require.Equal(t, traceoutcome.OutcomeFnError, attrs(runs[1])[leasetrace.AttrOutcome])
	require.Equal(t, codes.Error, runs[1].Status().Code)

	// Displaced while fn runs.
	key = uniqueKey(t)
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- m.Run(bg(), key, func(ctx context.Context, _ *lease.Lease) error {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		})
	}()
	<-started
	_, err := other.Takeover(bg(), key)
	require.NoError(t, err)
	require.ErrorIs(t, <-done, lease.ErrTakenOver)
	runs = s.named(leasetrace.SpanRun)
	require.Len(t, runs, 3)
	displaced := runs[2]
	require.Equal(t, traceoutcome.OutcomeTakenOver, attrs(displaced)[leasetrace.AttrOutcome])
	require.Equal(t, codes.Error, displaced.Status().Code)
	s.await(leasetrace.SpanLost)
	lost := s.one(leasetrace.SpanLost)
	requireChild(t, lost, displaced.SpanContext())
	require.Equal(t, "taken_over", attrs(lost)[leasetrace.AttrCause])
	require.Equal(t, attrs(displaced)[leasetrace.AttrRunID], attrs(lost)[leasetrace.AttrRunID])
}

// TestTraceOff: without a TracerProvider the Manager records no span, even
// when the caller's context carries a recording one, and the lease's
// context carries the caller's span.
func TestTraceOff(t *testing.T) {
	e := newEnv(t)
	s := newSpans(t)
	m := e.manager(lease.Config{})
	ctx, call := s.tp.Tracer("test").Start(bg(), "tool-call")
	l, err := m.Takeover(ctx, uniqueKey(t))
	require.NoError(t, err)
	require.Equal(t, call.SpanContext(), trace.SpanContextFromContext(l.Context()))
	_, err = l.Release(ctx)
	require.NoError(t, err)
	call.End()
	ended := s.sr.Ended()
	require.Len(t, ended, 1)
	require.Equal(t, "tool-call", ended[0].Name())
	require.Equal(t, []attribute.KeyValue(nil), ended[0].Attributes(), "nothing set on the caller's span")
}

// TestTraceAcquireWait: AcquireWait is one span over its attempts: granted
// once the holder releases; deadline_exceeded (a failure) when the caller
// gives up while the key is held.
func TestTraceAcquireWait(t *testing.T) {
	e := newEnv(t)
	s := newSpans(t)
	m, ev, err := lease.NewObserved(lease.Config{Pool: fencetest.Pool(t), Schema: e.schema, TracerProvider: s.tp})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	key := uniqueKey(t)
	holder, err := m.Acquire(bg(), key)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(bg(), 200*time.Millisecond)
	defer cancel()
	_, err = m.AcquireWait(ctx, key)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, lease.ErrHeld)
	gaveUp := s.one(leasetrace.SpanAcquireWait)
	require.Equal(t, traceoutcome.OutcomeDeadlineExceeded, attrs(gaveUp)[leasetrace.AttrOutcome])
	require.Equal(t, codes.Error, gaveUp.Status().Code)

	for len(ev.Waiting()) > 0 { // the first waiter's events
		<-ev.Waiting()
	}
	done := make(chan *lease.Lease, 1)
	go func() {
		l, err := m.AcquireWait(bg(), key)
		if err != nil {
			t.Error(err)
		}
		done <- l
	}()
	drainUntil(t, ev.Waiting(), key) // the second waiter found the key held and sleeps
	_, err = holder.Release(bg())
	require.NoError(t, err)
	l := <-done
	require.NotNil(t, l)
	got := s.named(leasetrace.SpanAcquireWait)
	require.Len(t, got, 2)
	a := attrs(got[1])
	require.Equal(t, traceoutcome.OutcomeGranted, a[leasetrace.AttrOutcome])
	require.Equal(t, l.RunID().String(), a[leasetrace.AttrRunID])
	require.Equal(t, codes.Unset, got[1].Status().Code)
}

// drainUntil receives from c until it delivers key.
func drainUntil(t *testing.T, c <-chan lease.Key, key lease.Key) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case k := <-c:
			if k == key {
				return
			}
		case <-timeout:
			t.Fatalf("no waiting event for %v", key)
		}
	}
}
