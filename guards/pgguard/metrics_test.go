package pgguard_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/internal/obs/obstest"
	"github.com/fencekit/fencekit/internal/testsvc"
)

// TestGuardMetrics: admitted fence statements and stale refusals (with the
// token gap) are counted under guard="postgres", through Fence (one-round-
// trip BeginFenced path) and FenceTx; no attribute names the resource.
func TestGuardMetrics(t *testing.T) {
	schema := setupSchema(t)
	pool := testsvc.Pool(t)
	mt := obstest.NewMeter(t)
	g := newGuard(t, pgguard.Config{DB: pool, Schema: schema, MeterProvider: mt.Provider})
	const res = "doc/secret-name"
	write := func(context.Context) error { return nil }
	require.NoError(t, g.Fence(bg(), res, 10, write))
	require.NoError(t, g.Fence(bg(), res, 10, write))
	require.Error(t, g.Fence(bg(), res, 6, write))
	tx, err := pool.Begin(bg())
	require.NoError(t, err)
	require.Error(t, g.FenceTx(bg(), tx, res, 9)) // rolls tx back
	require.Error(t, g.Fence(bg(), "", 10, write), "bad input counts as nothing")

	pts := mt.Collect()
	pg := map[string]string{"guard": "postgres"}
	require.EqualValues(t, 2, obstest.Value(pts, "fencekit.guard.accepted", pg))
	require.EqualValues(t, 2, obstest.Value(pts, "fencekit.guard.stale", pg))
	gap := obstest.Find(pts, "fencekit.guard.token_gap", pg)
	require.Len(t, gap, 1)
	require.EqualValues(t, 1, gap[0].Min, "10 − 9")
	require.EqualValues(t, 4, gap[0].Max, "10 − 6")
	for _, p := range pts {
		for _, v := range p.Attrs {
			require.NotEqual(t, res, v, "%s carries the resource", p.Name)
		}
	}
}
