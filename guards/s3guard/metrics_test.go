package s3guard

import (
	"github.com/fencekit/fencekit/fence"

	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/internal/obs/obstest"
)

// TestGuardMetrics: commits, stale refusals (with the token gap) and the
// retry after a stale pointer cache entry (another Guard wrote meanwhile,
// the cached ETag fails with 412) are counted under guard="s3"; no
// attribute names the key.
func TestGuardMetrics(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		ctx := testCtx(t)
		mt := obstest.NewMeter(t)
		a := e.store(t, nil, func(c *Config) { c.MeterProvider = mt.Provider })
		b := e.store(t, e.newClient(t, nil), nil) // another process, no metrics
		const key = "doc/secret-name"
		_, err := a.PutBytes(fence.WithClaim(ctx, fence.ClaimFor(ctx, 5)), key, []byte("a1"), PutOptions{}) // caches the pointer
		require.NoError(t, err)
		_, err = b.PutBytes(fence.WithClaim(ctx, fence.ClaimFor(ctx, 6)), key, []byte("b1"), PutOptions{})
		require.NoError(t, err)
		_, err = a.PutBytes(fence.WithClaim(ctx, fence.ClaimFor(ctx, 7)), key, []byte("a2"), PutOptions{}) // stale cache → 412 → re-read → retry
		require.NoError(t, err)
		_, err = a.PutBytes(fence.WithClaim(ctx, fence.ClaimFor(ctx, 3)), key, []byte("old"), PutOptions{})
		require.Error(t, err)

		pts := mt.Collect()
		s3 := map[string]string{"guard": "s3"}
		require.EqualValues(t, 2, obstest.Value(pts, "fencekit.guard.accepted", s3))
		require.EqualValues(t, 1, obstest.Value(pts, "fencekit.guard.stale", s3))
		require.EqualValues(t, 1, obstest.Value(pts, "fencekit.guard.s3.retries", s3))
		gap := obstest.Find(pts, "fencekit.guard.token_gap", s3)
		require.Len(t, gap, 1)
		require.EqualValues(t, 4, gap[0].Max, "7 − 3")
		for _, p := range pts {
			for _, v := range p.Attrs {
				require.NotEqual(t, key, v, "%s carries the key", p.Name)
			}
		}
	})
}
