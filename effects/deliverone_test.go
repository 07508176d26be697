package effects_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/effects"
)

// DeliverEffect claims and delivers one effect by id under the relay's
// claim/epoch protocol; a final effect, a missing one, and one in its
// retry backoff are not claimed, and nothing is sent for them.
func TestDeliverEffect(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t)
	o := e.outbox(httpTarget())
	r, err := effects.NewRelay(o, effects.RelayConfig{RetryMin: time.Minute, RetryMax: time.Minute}) // never started
	require.NoError(t, err)
	l, err := e.manager().Acquire(bg(), e.key())
	require.NoError(t, err)

	id, err := o.Record(l.Context(), tg.effect(t, "one", `{}`))
	require.NoError(t, err)
	res, err := r.DeliverEffect(bg(), id)
	require.NoError(t, err)
	require.Equal(t, effects.EffectResult{Attempted: true, State: effects.StateDelivered}, res)
	require.Len(t, tg.requests(effects.IdempotencyKey(id)), 1)
	in, err := o.Get(bg(), id)
	require.NoError(t, err)
	require.Equal(t, int64(1), in.Epoch)

	res, err = r.DeliverEffect(bg(), id)
	require.NoError(t, err)
	require.Equal(t, effects.EffectResult{State: effects.StateDelivered}, res, "final: not claimed again")
	require.Len(t, tg.requests(effects.IdempotencyKey(id)), 1)

	res, err = r.DeliverEffect(bg(), uuid.New())
	require.NoError(t, err)
	require.Equal(t, effects.EffectResult{}, res)

	tg.fail.Store(1)
	id2, err := o.Record(l.Context(), tg.effect(t, "two", `{}`))
	require.NoError(t, err)
	res, err = r.DeliverEffect(bg(), id2)
	require.NoError(t, err)
	require.True(t, res.Attempted)
	require.Equal(t, effects.StatePending, res.State)
	require.Greater(t, res.Due, 20*time.Second, "backoff of RetryMin jittered over its upper half")
	res, err = r.DeliverEffect(bg(), id2)
	require.NoError(t, err)
	require.False(t, res.Attempted, "not due: not claimed")
	require.Len(t, tg.requests(effects.IdempotencyKey(id2)), 1)
	require.Equal(t, int64(2), r.Stats().Claimed)

	_, err = r.DeliverEffect(bg(), uuid.Nil)
	require.ErrorIs(t, err, effects.ErrInvalidEffect)
}

// The outcomes of several effects go in one statement; when the server
// refuses it (here one outcome code does not fit the integer column),
// nothing of it was written and each outcome is written on its own: the
// others are written, only the bad one fails.
func TestOutcomesStatementRefusedWritesEachAlone(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t)
	o := e.outbox(httpTarget())
	r, err := effects.NewRelay(o, effects.RelayConfig{}) // never started
	require.NoError(t, err)
	l, err := e.manager().Acquire(bg(), e.key())
	require.NoError(t, err)
	var ids []uuid.UUID
	for _, k := range []string{"a", "bad", "b"} {
		id, err := o.Record(l.Context(), tg.effect(t, k, `{}`))
		require.NoError(t, err)
		ids = append(ids, id)
	}
	errs := effects.WriteDelivered(r, ids, []int{200, 1 << 40, 201})
	require.NoError(t, errs[0])
	require.Error(t, errs[1], "an outcome code out of the integer range")
	require.NoError(t, errs[2])
	for i, want := range []effects.State{effects.StateDelivered, effects.StatePending, effects.StateDelivered} {
		in, err := o.Get(bg(), ids[i])
		require.NoError(t, err)
		require.Equal(t, want, in.State, "effect %d", i)
	}
}
