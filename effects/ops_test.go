package effects_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/effects"
)

// Start and Stop are idempotent; Start after Stop is refused; goleak
// (TestMain) checks that nothing is left running.
func TestRelayStartStop(t *testing.T) {
	e := newEnv(t)
	o := e.outbox(httpTarget())
	r, err := effects.NewRelay(o, effects.RelayConfig{Poll: 10 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, r.Stop(), "Stop before Start")
	r, err = effects.NewRelay(o, effects.RelayConfig{Poll: 10 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, r.Start(bg()))
	require.NoError(t, r.Start(bg()))
	require.NoError(t, r.Stop())
	require.NoError(t, r.Stop())
	require.ErrorIs(t, r.Start(bg()), effects.ErrStopped)
	for range 20 { // start/stop stress under -race
		r, err := effects.NewRelay(o, effects.RelayConfig{Poll: time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, r.Start(bg()))
		require.NoError(t, r.Stop())
	}
}

// Stats counts by state; DeleteFinal deletes only final effects older
// than the age; a deleted request key can be recorded again.
func TestStatsAndRetention(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t)
	o := e.outbox(httpTarget())
	l, err := e.manager().Acquire(bg(), e.key())
	require.NoError(t, err)
	var ids []string
	for i := range 3 {
		id, err := o.Record(l.Context(), tg.effect(t, fmt.Sprintf("k%d", i), "{}"))
		require.NoError(t, err)
		ids = append(ids, id.String())
	}
	s, err := o.Stats(bg())
	require.NoError(t, err)
	require.Equal(t, int64(3), s.ByState[effects.StatePending])
	require.Positive(t, s.OldestPending)

	_, err = e.raw.Exec(bg(), fmt.Sprintf(`UPDATE %q.fencekit_effects SET state = 'delivered',
		final_at = clock_timestamp() - interval '2 hours' WHERE id = $1::uuid`, e.schema), ids[0])
	require.NoError(t, err)
	_, err = e.raw.Exec(bg(), fmt.Sprintf(`UPDATE %q.fencekit_effects SET state = 'rejected',
		final_at = clock_timestamp() WHERE id = $1::uuid`, e.schema), ids[1])
	require.NoError(t, err)
	n, err := o.DeleteFinal(bg(), time.Hour, 100)
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	s, err = o.Stats(bg())
	require.NoError(t, err)
	require.Equal(t, map[effects.State]int64{effects.StatePending: 1, effects.StateRejected: 1}, s.ByState)
	id, err := o.Record(l.Context(), tg.effect(t, "k0", "{}"))
	require.NoError(t, err)
	require.NotEqual(t, ids[0], id.String())
	_, err = o.DeleteFinal(bg(), time.Hour, 0)
	require.ErrorIs(t, err, effects.ErrInvalidEffect)
}
