package effects_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/effects"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
)

// Property 1: once token N+1 is granted, a record by token N fails with
// fence.ErrStale and leaves no row.
func TestRecordAfterTakeoverIsStale(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t)
	o := e.outbox(httpTarget())
	key := e.key()
	l1, err := e.manager().Acquire(bg(), key)
	require.NoError(t, err)
	old := claimOf(t, l1)

	id, err := o.Record(l1.Context(), tg.effect(t, "r1", `{"amount":1}`))
	require.NoError(t, err)
	require.NotEqual(t, uuid.Nil, id)

	l2, err := e.manager().Takeover(bg(), key)
	require.NoError(t, err)
	require.Greater(t, l2.Token(), old.Token)

	// The displaced run did not notice (a paused producer): it still
	// presents its claim, with a live context of its own.
	_, err = o.Record(fence.WithClaim(bg(), old), tg.effect(t, "r2", `{"amount":2}`))
	require.ErrorIs(t, err, fence.ErrStale)
	se, ok := fence.IsStale(err)
	require.True(t, ok)
	require.Equal(t, old.Token, se.Presented)
	require.Equal(t, l2.Token(), se.Highest)
	require.Equal(t, 1, e.count(), "the stale record left a row")

	// In the caller's transaction too: the transaction is rolled back, so
	// the caller's own writes in it cannot commit without the effect.
	tx, err := e.raw.Begin(bg())
	require.NoError(t, err)
	_, err = tx.Exec(bg(), fmt.Sprintf(`CREATE TABLE %q.side (v int)`, e.schema))
	require.NoError(t, err)
	_, err = o.RecordTx(fence.WithClaim(bg(), old), tx, tg.effect(t, "r3", `{"amount":3}`))
	require.ErrorIs(t, err, fence.ErrStale)
	require.ErrorIs(t, tx.Commit(bg()), pgx.ErrTxClosed)
	require.Equal(t, 1, e.count())

	// The new holder records.
	_, err = o.Record(l2.Context(), tg.effect(t, "r2", `{"amount":2}`))
	require.NoError(t, err)
	require.Equal(t, 2, e.count())
}

// Property 1, expiry and release: a claim whose lease expired or was
// released records nothing.
func TestRecordAfterReleaseIsStale(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t)
	o := e.outbox(httpTarget())
	key := e.key()
	l1, err := e.manager().Acquire(bg(), key)
	require.NoError(t, err)
	c := claimOf(t, l1)
	_, err = l1.Release(bg())
	require.NoError(t, err)
	_, err = o.Record(fence.WithClaim(bg(), c), tg.effect(t, "r1", "{}"))
	require.ErrorIs(t, err, fence.ErrStale)
	require.ErrorIs(t, err, lease.ErrReleased)
	require.Equal(t, 0, e.count())
}

// waitLockWaiters waits until n backends wait for a lock in the test
// database (the statements under test, blocked on the lease row).
func (e *env) waitLockWaiters(n int) {
	e.t.Helper()
	eventually(e.t, 10*time.Second, func() bool {
		var got int
		require.NoError(e.t, e.raw.QueryRow(bg(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%`+e.schema+`%'`).Scan(&got))
		return got >= n
	}, "%d lock waiters", n)
}

// Property 1, concurrent: a takeover that is being granted while a record
// of the displaced run waits for the lease row: the record fails and
// leaves no row. A raw transaction holds the row so that both statements
// queue behind it, the takeover first.
func TestRecordConcurrentWithTakeover(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t)
	o := e.outbox(httpTarget())
	for round := range 5 {
		key := e.key()
		l1, err := e.manager().Acquire(bg(), key)
		require.NoError(t, err)
		old := claimOf(t, l1)

		hold, err := e.raw.Begin(bg())
		require.NoError(t, err)
		t.Cleanup(func() { _ = hold.Rollback(bg()) }) // a failed round must not leave the takeover waiting
		_, err = hold.Exec(bg(), fmt.Sprintf(`SELECT 1 FROM %q.fencekit_leases WHERE account_id=$1 AND session_id=$2 FOR UPDATE`, e.schema), key.AccountID, key.SessionID)
		require.NoError(t, err)

		took := make(chan error, 1)
		go func() { _, err := e.manager().Takeover(bg(), key); took <- err }()
		e.waitLockWaiters(1)
		recorded := make(chan error, 1)
		go func() {
			_, err := o.Record(fence.WithClaim(bg(), old), tg.effect(t, fmt.Sprintf("r%d", round), "{}"))
			recorded <- err
		}()
		e.waitLockWaiters(2)
		require.NoError(t, hold.Rollback(bg()))
		require.NoError(t, <-took)
		err = <-recorded
		require.ErrorIs(t, err, fence.ErrStale, "round %d", round)
		require.Equal(t, 0, e.count(), "round %d", round)
	}
}

// The other order: a record holds the lease row; a takeover requested
// meanwhile waits for its commit, so the effect was recorded while the
// producer held the key (and is delivered by default).
func TestTakeoverWaitsForRecord(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t)
	o := e.outbox(httpTarget())
	key := e.key()
	l1, err := e.manager().Acquire(bg(), key)
	require.NoError(t, err)

	tx, err := e.raw.Begin(bg())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(bg()) }) // a failure must not keep the connection from the pool's Close
	id, err := o.RecordTx(l1.Context(), tx, tg.effect(t, "r1", "{}"))
	require.NoError(t, err)
	took := make(chan error, 1)
	go func() { _, err := e.manager().Takeover(bg(), key); took <- err }()
	e.waitLockWaiters(1)
	select {
	case err := <-took:
		t.Fatalf("takeover returned while the record held the row: %v", err)
	default:
	}
	require.NoError(t, tx.Commit(bg()))
	require.NoError(t, <-took)

	e.relay([]effects.Target{httpTarget()}, effects.RelayConfig{})
	in, err := o.Await(bg(), id)
	require.NoError(t, err)
	require.Equal(t, effects.StateDelivered, in.State)
	require.Len(t, tg.requests(effects.IdempotencyKey(id)), 1)
}

// Property 3: a relay that dies between "target answered" and "outcome
// written" leads to a redelivery with byte-identical bytes and the same
// key; the target applies the effect once.
func TestRedeliveryAfterRelayDiedIsIdentical(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t)
	o := e.outbox(httpTarget())
	l, err := e.manager().Acquire(bg(), e.key())
	require.NoError(t, err)
	id, err := o.Record(l.Context(), tg.effect(t, "charge-1", `{"amount":1250,"currency":"eur"}`))
	require.NoError(t, err)

	var died atomic.Bool
	e.relay([]effects.Target{httpTarget()}, effects.RelayConfig{ClaimFor: 300 * time.Millisecond}, func(r *effects.Relay) {
		effects.SetHooks(r, nil, func(uuid.UUID, int64) bool { return died.CompareAndSwap(false, true) })
	})
	in, err := o.Await(bg(), id)
	require.NoError(t, err)
	require.Equal(t, effects.StateDelivered, in.State)
	require.True(t, died.Load())
	require.Equal(t, 2, in.Attempts)

	got := tg.requests(effects.IdempotencyKey(id))
	require.Len(t, got, 2, "one delivery, one redelivery")
	require.Equal(t, got[0].Body, got[1].Body)
	require.Equal(t, `{"amount":1250,"currency":"eur"}`, got[0].Body)
	require.Equal(t, got[0].Header.Get("Content-Type"), got[1].Header.Get("Content-Type"))
	tg.mu.Lock()
	require.Equal(t, 2, tg.applied[effects.IdempotencyKey(id)], "the target saw the key twice")
	require.Len(t, tg.applied, 1, "one effect at the target")
	tg.mu.Unlock()
}

// Property 4: a relay paused after its claim cannot write its outcome once
// another relay re-claimed the effect.
func TestPausedRelayCannotWriteOutcome(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t)
	o := e.outbox(httpTarget())
	l, err := e.manager().Acquire(bg(), e.key())
	require.NoError(t, err)
	id, err := o.Record(l.Context(), tg.effect(t, "p1", "{}"))
	require.NoError(t, err)

	paused, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	a := e.relay([]effects.Target{httpTarget()}, effects.RelayConfig{Name: "relay-a", ClaimFor: 200 * time.Millisecond}, func(r *effects.Relay) {
		effects.SetHooks(r, func(uuid.UUID, int64) {
			once.Do(func() { close(paused); <-resume })
		}, nil)
	})
	<-paused
	b := e.relay([]effects.Target{httpTarget()}, effects.RelayConfig{Name: "relay-b", ClaimFor: 10 * time.Second})
	in, err := o.Await(bg(), id)
	require.NoError(t, err)
	require.Equal(t, effects.StateDelivered, in.State)
	require.Equal(t, "relay-b", in.ClaimedBy)
	require.Equal(t, int64(2), in.Epoch)
	close(resume)
	eventually(t, 10*time.Second, func() bool { return a.Stats().Superseded == 1 }, "relay-a's outcome refused")
	after, err := o.Get(bg(), id)
	require.NoError(t, err)
	require.Equal(t, in.UpdatedAt, after.UpdatedAt, "relay-a changed the row")
	// Await may return on the outcome's NOTIFY before relay-b counted it.
	eventually(t, 10*time.Second, func() bool { return b.Stats().Delivered == 1 }, "relay-b's outcome counted")
	require.Zero(t, a.Stats().Delivered)
}

// Property 5: same (lease key, request key) gives one effect id; the same
// request key with another request or target is a conflict.
func TestDuplicatesAndConflict(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t)
	o := e.outbox(httpTarget(), effects.Target{Name: "other", Deliverer: &effects.HTTP{}})
	key := e.key()
	l, err := e.manager().Acquire(bg(), key)
	require.NoError(t, err)
	id1, err := o.Record(l.Context(), tg.effect(t, "k", `{"a":1}`))
	require.NoError(t, err)
	id2, err := o.Record(l.Context(), tg.effect(t, "k", `{"a":1}`))
	require.NoError(t, err)
	require.Equal(t, id1, id2)

	_, err = o.Record(l.Context(), tg.effect(t, "k", `{"a":2}`))
	var ce *effects.ConflictError
	require.ErrorAs(t, err, &ce)
	require.ErrorIs(t, err, effects.ErrConflict)
	require.Equal(t, id1, ce.Existing)

	other := tg.effect(t, "k", `{"a":1}`)
	other.Target = "other"
	_, err = o.Record(l.Context(), other)
	require.ErrorIs(t, err, effects.ErrConflict)

	// A takeover's new run replaying the request key gets the same effect.
	l2, err := e.manager().Takeover(bg(), key)
	require.NoError(t, err)
	id3, err := o.Record(l2.Context(), tg.effect(t, "k", `{"a":1}`))
	require.NoError(t, err)
	require.Equal(t, id1, id3)
	require.Equal(t, 1, e.count())
}

// Property 6: past the target's dedup window with the outcome unknown the
// effect ends ambiguous and is not sent again: whether its sends failed
// (503) or were cut at the window's end (a target slower than the window).
func TestAmbiguousPastDedupWindow(t *testing.T) {
	t.Run("target answers 503", func(t *testing.T) { testAmbiguousPastWindow(t, 0) })
	t.Run("target slower than the window", func(t *testing.T) { testAmbiguousPastWindow(t, time.Second) })
}

func testAmbiguousPastWindow(t *testing.T, delay time.Duration) {
	e := newEnv(t)
	tg := newTarget(t)
	tg.fail.Store(1 << 30) // every request fails with 503
	tg.delay.Store(int64(delay))
	window := func(t *effects.Target) { t.DedupWindow = 300 * time.Millisecond }
	o := e.outbox(httpTarget(window))
	l, err := e.manager().Acquire(bg(), e.key())
	require.NoError(t, err)
	id, err := o.Record(l.Context(), tg.effect(t, "w1", "{}"))
	require.NoError(t, err)
	r := e.relay([]effects.Target{httpTarget(window)}, effects.RelayConfig{})
	in, err := o.Await(bg(), id)
	require.NoError(t, err)
	require.Equal(t, effects.StateAmbiguous, in.State)
	require.Contains(t, in.Detail, "dedup window")
	sent := len(tg.requests(effects.IdempotencyKey(id)))
	require.GreaterOrEqual(t, sent, 1)
	// Every claim but the last sent once; the last found the window
	// passed. A send is bounded by the window's end, so the attempt
	// before the last may end on that deadline instead of the target's
	// answer (always with the slow target; on a loaded machine with the
	// fast one too): its request may or may not have reached the target.
	if delay == 0 && strings.Contains(in.LastError, "503") {
		require.Equal(t, in.Attempts-1, sent, "every claim but the last sent once; the last found the window passed")
	} else {
		require.Contains(t, in.LastError, context.DeadlineExceeded.Error(), "the last send failed on neither the 503 nor the window's deadline")
		require.Contains(t, []int{in.Attempts - 2, in.Attempts - 1}, sent, "every claim but the last two sent once; the one cut at the window's end at most once")
	}
	// Final: no relay claims it again. (Stop first: Await may return on
	// the outcome's NOTIFY before the relay counted the outcome.)
	require.NoError(t, r.Stop())
	require.Equal(t, int64(1), r.Stats().Ambiguous)
	after, err := o.Get(bg(), id)
	require.NoError(t, err)
	require.Equal(t, in.Epoch, after.Epoch)
}

// Property 7: an at-most-once target whose relay crashed after the send
// ends ambiguous and is never resent.
func TestAtMostOnceCrashIsAmbiguous(t *testing.T) {
	e := newEnv(t)
	var sends atomic.Int32
	mail := effects.Target{Name: "mail", AtMostOnce: true, Deliverer: effects.DelivererFunc(func(ctx context.Context, d effects.Delivery) (effects.Result, error) {
		sends.Add(1)
		return effects.Result{Code: 250}, nil
	})}
	o := e.outbox(mail)
	l, err := e.manager().Acquire(bg(), e.key())
	require.NoError(t, err)
	id, err := o.Record(l.Context(), effects.Effect{Target: "mail", RequestKey: "m1", Request: []byte("hello")})
	require.NoError(t, err)
	var died atomic.Bool
	e.relay([]effects.Target{mail}, effects.RelayConfig{ClaimFor: 200 * time.Millisecond}, func(r *effects.Relay) {
		effects.SetHooks(r, nil, func(uuid.UUID, int64) bool { return died.CompareAndSwap(false, true) })
	})
	in, err := o.Await(bg(), id)
	require.NoError(t, err)
	require.Equal(t, effects.StateAmbiguous, in.State)
	require.Contains(t, in.Detail, "at-most-once")
	require.Equal(t, int32(1), sends.Load(), "resent")
	require.Equal(t, 2, in.Attempts)
}

// An at-most-once send that fails with the outcome unknown ends ambiguous;
// one that provably did not leave (NotSent) is retried.
func TestAtMostOnceErrors(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int32
	mail := effects.Target{Name: "mail", AtMostOnce: true, Deliverer: effects.DelivererFunc(func(ctx context.Context, d effects.Delivery) (effects.Result, error) {
		n := calls.Add(1)
		switch {
		case string(d.Request) == "unknown":
			return effects.Result{}, errors.New("connection reset after DATA")
		case n == 1:
			return effects.Result{}, effects.NotSent(errors.New("connection refused"))
		}
		return effects.Result{Code: 250}, nil
	})}
	o := e.outbox(mail)
	l, err := e.manager().Acquire(bg(), e.key())
	require.NoError(t, err)
	ok, err := o.Record(l.Context(), effects.Effect{Target: "mail", RequestKey: "ok", Request: []byte("fine")})
	require.NoError(t, err)
	e.relay([]effects.Target{mail}, effects.RelayConfig{Batch: 1})
	in, err := o.Await(bg(), ok)
	require.NoError(t, err)
	require.Equal(t, effects.StateDelivered, in.State)
	require.Equal(t, 2, in.Attempts)

	unk, err := o.Record(l.Context(), effects.Effect{Target: "mail", RequestKey: "unknown", Request: []byte("unknown")})
	require.NoError(t, err)
	in, err = o.Await(bg(), unk)
	require.NoError(t, err)
	require.Equal(t, effects.StateAmbiguous, in.State)
	require.Equal(t, 1, in.Attempts)
}

// Property 8: after the new holder cancels the displaced run's unclaimed
// effects, none of them is sent.
func TestCancelDisplacedSendsNothing(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t)
	o := e.outbox(httpTarget())
	key := e.key()
	l1, err := e.manager().Acquire(bg(), key)
	require.NoError(t, err)
	var old []uuid.UUID
	for i := range 3 {
		id, err := o.Record(l1.Context(), tg.effect(t, fmt.Sprintf("old-%d", i), "{}"))
		require.NoError(t, err)
		old = append(old, id)
	}
	oldClaim := claimOf(t, l1)
	l2, err := e.manager().Takeover(bg(), key)
	require.NoError(t, err)

	// The displaced run cannot cancel.
	_, err = o.CancelDisplaced(fence.WithClaim(bg(), oldClaim))
	require.ErrorIs(t, err, fence.ErrStale)

	_, err = o.CancelDisplaced(bg())
	require.ErrorIs(t, err, fence.ErrNoToken, "no claim in ctx")
	ids, err := o.CancelDisplaced(l2.Context())
	require.NoError(t, err)
	require.ElementsMatch(t, old, ids)

	mine, err := o.Record(l2.Context(), tg.effect(t, "new-1", "{}"))
	require.NoError(t, err)
	e.relay([]effects.Target{httpTarget()}, effects.RelayConfig{})
	in, err := o.Await(bg(), mine)
	require.NoError(t, err)
	require.Equal(t, effects.StateDelivered, in.State)
	for _, id := range old {
		in, err := o.Get(bg(), id)
		require.NoError(t, err)
		require.Equal(t, effects.StateCanceled, in.State)
		require.Zero(t, in.Epoch)
		require.Empty(t, tg.requests(effects.IdempotencyKey(id)))
	}
	require.Equal(t, 1, tg.total())
}

// Several relays (independent pools) deliver N effects: each reaches the
// target exactly once.
func TestConcurrentRelaysDeliverOnce(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t)
	o := e.outbox(httpTarget())
	for i := range 3 {
		e.relay([]effects.Target{httpTarget()}, effects.RelayConfig{Name: fmt.Sprintf("r%d", i), Batch: 4})
	}
	const n = 60
	keys := make([]lease.Key, 4)
	var ls []*lease.Lease
	for i := range keys {
		keys[i] = e.key()
		l, err := e.manager().Acquire(bg(), keys[i])
		require.NoError(t, err)
		ls = append(ls, l)
	}
	ids := make([]uuid.UUID, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := ls[i%len(ls)]
			id, err := o.Record(l.Context(), tg.effect(t, fmt.Sprintf("e%d", i), fmt.Sprintf(`{"i":%d}`, i)))
			ids[i] = id
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, id := range ids {
		in, err := o.Await(bg(), id)
		require.NoError(t, err)
		require.Equal(t, effects.StateDelivered, in.State)
		require.Len(t, tg.requests(effects.IdempotencyKey(id)), 1, "effect %s", id)
	}
	require.Equal(t, n, tg.total())
}

// The HTTP deliverer: 5xx is retried, a dropped reply is retried with the
// same key (the target applies once), 4xx is rejected.
func TestHTTPDelivererOutcomes(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t)
	o := e.outbox(httpTarget())
	l, err := e.manager().Acquire(bg(), e.key())
	require.NoError(t, err)
	// No connection reuse: Go's transport itself replays a request that
	// carries an Idempotency-Key header when a reused connection breaks,
	// which would hide the relay's own retry of the dropped reply.
	fresh := func(t *effects.Target) {
		t.Deliverer = &effects.HTTP{Client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}
	}
	r := e.relay([]effects.Target{httpTarget(fresh)}, effects.RelayConfig{Batch: 1})

	tg.fail.Store(2)
	id, err := o.Record(l.Context(), tg.effect(t, "five", "{}"))
	require.NoError(t, err)
	in, err := o.Await(bg(), id)
	require.NoError(t, err)
	require.Equal(t, effects.StateDelivered, in.State)
	require.Equal(t, http.StatusCreated, in.Code)
	require.Equal(t, 3, in.Attempts)

	tg.drop.Store(1)
	id, err = o.Record(l.Context(), tg.effect(t, "drop", "{}"))
	require.NoError(t, err)
	in, err = o.Await(bg(), id)
	require.NoError(t, err)
	require.Equal(t, effects.StateDelivered, in.State)
	require.Len(t, tg.requests(effects.IdempotencyKey(id)), 2)

	b, err := effects.HTTPRequest{Method: "POST", URL: tg.srv.URL + "/missing"}.Freeze()
	require.NoError(t, err)
	id, err = o.Record(l.Context(), effects.Effect{Target: "pay", RequestKey: "reject", Request: b})
	require.NoError(t, err)
	in, err = o.Await(bg(), id)
	require.NoError(t, err)
	require.Equal(t, effects.StateRejected, in.State)
	require.Equal(t, http.StatusNotFound, in.Code)
	require.Equal(t, 1, in.Attempts)
	require.Equal(t, int64(3), r.Stats().Retried)
	// Await may return on the outcome's NOTIFY before the relay counted it.
	eventually(t, 10*time.Second, func() bool { return r.Stats().Rejected == 1 }, "the rejection counted")
}

// Bad input: a typed error and nothing recorded.
func TestBadInput(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t)
	o, err := effects.New(effects.Config{Pool: fencetest.Pool(t), Schema: e.schema, Targets: []effects.Target{httpTarget()}, MaxRequestBytes: 1024})
	require.NoError(t, err)
	l, err := e.manager().Acquire(bg(), e.key())
	require.NoError(t, err)
	ok := tg.effect(t, "k", "{}")
	with := func(f func(*effects.Effect)) effects.Effect { c := ok; f(&c); return c }
	big, err := effects.HTTPRequest{Method: "POST", URL: tg.srv.URL, Body: make([]byte, 2000)}.Freeze()
	require.NoError(t, err)
	cases := []struct {
		name string
		ctx  context.Context
		e    effects.Effect
		want error
	}{
		{"nil ctx", nil, ok, fence.ErrNilArgument},
		{"no claim", bg(), ok, fence.ErrNoToken},
		{"unknown target", l.Context(), with(func(e *effects.Effect) { e.Target = "nope" }), effects.ErrUnknownTarget},
		{"empty key", l.Context(), with(func(e *effects.Effect) { e.RequestKey = "" }), effects.ErrInvalidEffect},
		{"long key", l.Context(), with(func(e *effects.Effect) { e.RequestKey = string(make([]byte, 256)) }), effects.ErrInvalidEffect},
		{"NUL key", l.Context(), with(func(e *effects.Effect) { e.RequestKey = "a\x00b" }), effects.ErrInvalidEffect},
		{"bad UTF-8 key", l.Context(), with(func(e *effects.Effect) { e.RequestKey = "\xff" }), effects.ErrInvalidEffect},
		{"empty request", l.Context(), with(func(e *effects.Effect) { e.Request = nil }), effects.ErrInvalidEffect},
		{"oversized", l.Context(), with(func(e *effects.Effect) { e.Request = big }), effects.ErrInvalidEffect},
		{"not HTTP", l.Context(), with(func(e *effects.Effect) { e.Request = []byte("x") }), effects.ErrInvalidEffect},
		{"bad URL", l.Context(), with(func(e *effects.Effect) { e.Request = []byte(`{"method":"POST","url":"ftp://x/y"}`) }), effects.ErrInvalidEffect},
		{"relative URL", l.Context(), with(func(e *effects.Effect) { e.Request = []byte(`{"method":"POST","url":"/y"}`) }), effects.ErrInvalidEffect},
		{"bad method", l.Context(), with(func(e *effects.Effect) { e.Request = []byte(`{"method":"PO ST","url":"http://x/y"}`) }), effects.ErrInvalidEffect},
		{"foreign key", l.Context(), with(func(e *effects.Effect) { e.Key = lease.Key{AccountID: "x", SessionID: "y"} }), fence.ErrOutOfScope},
		{"bad key", l.Context(), with(func(e *effects.Effect) { e.Key = lease.Key{AccountID: "x\x00", SessionID: "y"} }), lease.ErrInvalidKey},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := o.Record(c.ctx, c.e) //nolint:staticcheck // nil ctx on purpose
			require.ErrorIs(t, err, c.want)
		})
	}
	_, err = o.Record(fence.WithClaim(bg(), fence.Claim{Token: 5}), ok)
	require.ErrorIs(t, err, effects.ErrInvalidEffect, "a claim without scope and no key")
	_, err = o.Record(fence.WithClaim(bg(), fence.Claim{Token: 5, Run: "not-a-uuid"}), with(func(e *effects.Effect) { e.Key = lease.Key{AccountID: "a", SessionID: "b"} }))
	require.ErrorIs(t, err, fence.ErrInvalidRun)
	_, err = o.Record(fence.WithClaim(bg(), fence.Claim{Token: 5}), with(func(e *effects.Effect) { e.Key = lease.Key{AccountID: "a", SessionID: "b"} }))
	require.ErrorIs(t, err, fence.ErrInvalidRun)
	_, err = o.RecordTx(l.Context(), nil, ok)
	require.ErrorIs(t, err, fence.ErrNilArgument)
	require.Equal(t, 0, e.count())

	for _, bad := range []effects.Config{
		{},
		{Pool: e.raw, Schema: "Bad-Schema", Targets: []effects.Target{httpTarget()}},
		{Pool: e.raw, LeaseSchema: "pg_x", Targets: []effects.Target{httpTarget()}},
		{Pool: e.raw, Targets: []effects.Target{{Name: "a b"}}},
		{Pool: e.raw, Targets: []effects.Target{httpTarget(), httpTarget()}},
		{Pool: e.raw, Targets: []effects.Target{httpTarget()}, MaxRequestBytes: -1},
	} {
		_, err := effects.New(bad)
		require.ErrorIs(t, err, fence.ErrInvalidConfig)
	}
	_, err = effects.NewRelay(o, effects.RelayConfig{Targets: []string{"nope"}})
	require.ErrorIs(t, err, fence.ErrInvalidConfig)
}

// The record statement repeats lease.CheckClaimTx's definition of a live
// row; both renewal modes of the lease package: heartbeat rows (the
// default, the other tests) and per-lease expiry. A record succeeds while
// the lease is held and is refused as stale after its release, with no
// row left.
func TestRecordPerLeaseRenewal(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t)
	o := e.outbox(httpTarget())
	m, err := lease.New(lease.Config{Pool: fencetest.Pool(t), Schema: e.schema, TTL: 10 * time.Second, Renewal: lease.RenewalPerLease})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	l, err := m.Acquire(bg(), e.key())
	require.NoError(t, err)
	c := claimOf(t, l)
	_, err = o.Record(l.Context(), tg.effect(t, "r1", `{"amount":1}`))
	require.NoError(t, err)
	_, err = l.Release(bg())
	require.NoError(t, err)
	_, err = o.Record(fence.WithClaim(bg(), c), tg.effect(t, "r2", `{"amount":2}`))
	require.ErrorIs(t, err, fence.ErrStale)
	require.ErrorIs(t, err, lease.ErrReleased)
	require.Equal(t, 1, e.count())
}

// An input error of RecordTx (here a claim whose run is not a lease
// run id) is returned before any statement: the caller's transaction is
// still usable and commits its own work.
func TestRecordTxBadInputKeepsTx(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t)
	o := e.outbox(httpTarget())
	l, err := e.manager().Acquire(bg(), e.key())
	require.NoError(t, err)
	tx, err := e.raw.Begin(bg())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(bg()) }()
	bad := claimOf(t, l)
	bad.Run = "not-a-uuid"
	_, err = o.RecordTx(fence.WithClaim(bg(), bad), tx, tg.effect(t, "r1", `{"amount":1}`))
	require.ErrorIs(t, err, fence.ErrInvalidRun)
	id, err := o.RecordTx(fence.WithClaim(bg(), claimOf(t, l)), tx, tg.effect(t, "r1", `{"amount":1}`))
	require.NoError(t, err, "the transaction must still be usable")
	require.NoError(t, tx.Commit(bg()))
	in, err := o.Get(bg(), id)
	require.NoError(t, err)
	require.Equal(t, effects.StatePending, in.State)
}

// Record's own transaction waits for the lease row's lock at most
// Config.LockTimeout (set in the same implicit transaction as the record
// statement), then fails with fence.ErrBusy and records nothing; the
// caller's transaction (RecordTx) keeps its own settings.
func TestRecordLockTimeoutIsBusy(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t)
	o, err := effects.New(effects.Config{Pool: fencetest.Pool(t), Schema: e.schema, Targets: []effects.Target{httpTarget()},
		LockTimeout: 50 * time.Millisecond})
	require.NoError(t, err)
	key := e.key()
	l, err := e.manager().Acquire(bg(), key)
	require.NoError(t, err)
	// Another transaction holds the lease row's lock (as a grant would).
	locker, err := e.raw.Begin(bg())
	require.NoError(t, err)
	defer func() { _ = locker.Rollback(bg()) }()
	_, err = locker.Exec(bg(), fmt.Sprintf(`SELECT 1 FROM %q.fencekit_leases WHERE account_id = $1 AND session_id = $2 FOR UPDATE`, e.schema),
		key.AccountID, key.SessionID)
	require.NoError(t, err)
	// Without the lock timeout the call would wait for its context.
	ctx, cancel := context.WithTimeout(l.Context(), 3*time.Second)
	defer cancel()
	_, err = o.Record(ctx, tg.effect(t, "r1", `{"amount":1}`))
	require.ErrorIs(t, err, fence.ErrBusy, "the lock timeout was not applied")
	require.NoError(t, locker.Rollback(bg()))
	require.Equal(t, 0, e.count())
	_, err = o.Record(l.Context(), tg.effect(t, "r1", `{"amount":1}`))
	require.NoError(t, err)
	require.Equal(t, 1, e.count())
}

// Await is woken by the outcome's NOTIFY: with a poll interval far longer
// than the test, it returns once the relay delivered, and its listener is
// gone afterwards (goleak in TestMain).
func TestAwaitWokenByOutcome(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t)
	o, err := effects.New(effects.Config{Pool: fencetest.Pool(t), Schema: e.schema, Targets: []effects.Target{httpTarget()},
		AwaitPoll: time.Hour})
	require.NoError(t, err)
	l, err := e.manager().Acquire(bg(), e.key())
	require.NoError(t, err)
	tg.delay.Store(int64(200 * time.Millisecond)) // the outcome comes after Await's first read
	id, err := o.Record(l.Context(), tg.effect(t, "r1", `{"amount":1}`))
	require.NoError(t, err)
	e.relay([]effects.Target{httpTarget()}, effects.RelayConfig{})
	ctx, cancel := context.WithTimeout(bg(), 20*time.Second)
	defer cancel()
	in, err := o.Await(ctx, id)
	require.NoError(t, err, "Await was not woken by the outcome (its poll is an hour)")
	require.Equal(t, effects.StateDelivered, in.State)
}
