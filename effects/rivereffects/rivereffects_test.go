package rivereffects_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/effects"
	"github.com/fencekit/fencekit/effects/rivereffects"
	"github.com/fencekit/fencekit/fence"
)

// Effects recorded through the Recorder (half in the caller's own
// transaction) are delivered by river workers alone: one request per
// effect, every job completed. The first request of one effect fails with
// 503: its job snoozes and the retry, under a new claim, delivers it.
func TestRiverWorkersDeliver(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t)
	tg.fail = 1
	o := e.outbox()
	w, relay := e.worker(o, "river-worker")
	worker := e.client(w, 4)
	rec, err := rivereffects.New(rivereffects.Config{Outbox: o, Client: worker, Pool: e.pool})
	require.NoError(t, err)
	l, err := e.manager().Acquire(bg(), key())
	require.NoError(t, err)

	var ids []uuid.UUID
	for i := range 20 {
		var id uuid.UUID
		if i%2 == 0 {
			id, err = rec.Record(l.Context(), tg.effect(t, fmt.Sprintf("k%d", i)))
		} else {
			tx, berr := e.pool.Begin(bg())
			require.NoError(t, berr)
			id, err = rec.RecordTx(l.Context(), tx, tg.effect(t, fmt.Sprintf("k%d", i)))
			require.NoError(t, err)
			err = tx.Commit(bg())
		}
		require.NoError(t, err)
		ids = append(ids, id)
	}
	again, err := rec.Record(l.Context(), tg.effect(t, "k0"))
	require.NoError(t, err)
	require.Equal(t, ids[0], again, "same request key, same effect")

	for _, id := range ids {
		ctx, cancel := context10s()
		in, err := o.Await(ctx, id)
		cancel()
		require.NoError(t, err)
		require.Equal(t, effects.StateDelivered, in.State, "effect %s: %s", id, in.LastError)
		require.Equal(t, 1, tg.count(effects.IdempotencyKey(id))-boolInt(in.Attempts == 2), "effect %s", id)
	}
	eventually(t, 10*time.Second, func() bool { return e.jobs()["completed"] == 20 }, "20 jobs completed (the duplicate record inserted none)")
	require.Equal(t, map[string]int{"completed": 20}, e.jobs())
	st := relay.Stats()
	require.Equal(t, int64(21), st.Claimed, "20 first attempts and one retry")
	require.Equal(t, int64(20), st.Delivered)
	require.Equal(t, int64(1), st.Retried)
}

// River workers and an effects Relay on the same schema at once: each
// effect is claimed by one of them per attempt, and sent once.
func TestRiverWorkersAndRelayDeliverOnce(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t)
	o := e.outbox()
	w, wr := e.worker(o, "river-worker")
	worker := e.client(w, 4)
	r, err := effects.NewRelay(e.outbox(), effects.RelayConfig{Name: "relay", Poll: 5 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, r.Start(bg()))
	t.Cleanup(func() { require.NoError(t, r.Stop()) })
	rec, err := rivereffects.New(rivereffects.Config{Outbox: o, Client: worker, Pool: e.pool})
	require.NoError(t, err)
	l, err := e.manager().Acquire(bg(), key())
	require.NoError(t, err)
	var ids []uuid.UUID
	for i := range 40 {
		id, err := rec.Record(l.Context(), tg.effect(t, fmt.Sprintf("k%d", i)))
		require.NoError(t, err)
		ids = append(ids, id)
	}
	for _, id := range ids {
		ctx, cancel := context10s()
		in, err := o.Await(ctx, id)
		cancel()
		require.NoError(t, err)
		require.Equal(t, effects.StateDelivered, in.State)
		require.Equal(t, int64(1), in.Epoch, "claimed once")
		require.Equal(t, 1, tg.count(effects.IdempotencyKey(id)))
	}
	eventually(t, 10*time.Second, func() bool { return e.jobs()["completed"] == 40 }, "40 jobs completed")
	require.Equal(t, int64(40), wr.Stats().Claimed+r.Stats().Claimed)
	t.Logf("claims: river workers %d, relay %d", wr.Stats().Claimed, r.Stats().Claimed)
}

// A displaced producer records nothing and inserts no job: Record after a
// takeover fails as stale, and in the caller's transaction the work done
// before is rolled back with it.
func TestDisplacedProducerInsertsNoJob(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t)
	o := e.outbox()
	ins := e.client(nil, 0)
	rec, err := rivereffects.New(rivereffects.Config{Outbox: o, Client: ins, Pool: e.pool})
	require.NoError(t, err)
	k := key()
	m := e.manager()
	l1, err := m.Acquire(bg(), k)
	require.NoError(t, err)
	old, err := fence.ClaimFromContext(l1.Context())
	require.NoError(t, err)
	_, err = m.Takeover(bg(), k)
	require.NoError(t, err)
	stale := fence.WithClaim(bg(), old)

	_, err = rec.Record(stale, tg.effect(t, "late"))
	require.ErrorIs(t, err, fence.ErrStale)

	_, err = e.pool.Exec(bg(), fmt.Sprintf(`CREATE TABLE %q.work (v text)`, e.schema))
	require.NoError(t, err)
	tx, err := e.pool.Begin(bg())
	require.NoError(t, err)
	_, err = tx.Exec(bg(), fmt.Sprintf(`INSERT INTO %q.work VALUES ('done')`, e.schema))
	require.NoError(t, err)
	_, err = rec.RecordTx(stale, tx, tg.effect(t, "late-tx"))
	require.ErrorIs(t, err, fence.ErrStale)
	require.Error(t, tx.Commit(bg()), "the transaction was rolled back")

	var work int
	require.NoError(t, e.pool.QueryRow(bg(), fmt.Sprintf(`SELECT count(*) FROM %q.work`, e.schema)).Scan(&work))
	require.Zero(t, work)
	require.Zero(t, e.effectsCount())
	require.Empty(t, e.jobs())
}

// A job for an effect that is already final (delivered by a relay) and a
// job for an effect that does not exist complete without a request.
func TestJobForFinalOrMissingEffectIsNoop(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t)
	o := e.outbox()
	l, err := e.manager().Acquire(bg(), key())
	require.NoError(t, err)
	id, err := o.Record(l.Context(), tg.effect(t, "direct")) // no job
	require.NoError(t, err)
	r, err := effects.NewRelay(o, effects.RelayConfig{})
	require.NoError(t, err)
	res, err := r.DeliverEffect(bg(), id)
	require.NoError(t, err)
	require.Equal(t, effects.StateDelivered, res.State)

	w, wr := e.worker(o, "river-worker")
	c := e.client(w, 2)
	_, err = c.Insert(bg(), rivereffects.Args{EffectID: id}, nil)
	require.NoError(t, err)
	_, err = c.Insert(bg(), rivereffects.Args{EffectID: uuid.New()}, nil)
	require.NoError(t, err)
	eventually(t, 10*time.Second, func() bool { return e.jobs()["completed"] == 2 }, "both jobs completed")
	require.Equal(t, 1, tg.count(effects.IdempotencyKey(id)))
	require.Zero(t, wr.Stats().Claimed)
}

// Bad configuration is refused with effects' typed error.
func TestConfig(t *testing.T) {
	_, err := rivereffects.New(rivereffects.Config{})
	require.ErrorIs(t, err, fence.ErrInvalidConfig)
	_, err = rivereffects.NewWorker(rivereffects.WorkerConfig{})
	require.ErrorIs(t, err, fence.ErrInvalidConfig)
	require.Equal(t, rivereffects.Kind, rivereffects.Args{}.Kind())
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
