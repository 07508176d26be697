package pgguard_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/internal/obs/obstest"
)

// syncBuffer is a bytes.Buffer safe for the logger's concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestGuardMetrics: admitted fence statements, stale refusals (with the
// token gap) and reuse refusals are counted under guard="postgres", through
// Fence (one-round-trip batch path), FenceTx and InTx; a reuse is logged at
// Error; no metric attribute names the resource.
func TestGuardMetrics(t *testing.T) {
	schema := setupSchema(t)
	pool := fencetest.Pool(t)
	mt := obstest.NewMeter(t)
	var logs syncBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	g := newGuard(t, pgguard.Config{DB: pool, Schema: schema, MeterProvider: mt.Provider, Logger: logger})
	const res = "doc/secret-name"
	write := func(context.Context) error { return nil }
	require.NoError(t, g.Fence(bg(), res, 10, write))
	require.NoError(t, g.Fence(bg(), res, 10, write))
	require.Error(t, g.Fence(bg(), res, 6, write))
	tx, err := pool.Begin(bg())
	require.NoError(t, err)
	require.Error(t, g.FenceTx(fence.WithClaim(bg(), cl(9)), tx, res)) // rolls tx back
	require.Error(t, g.Fence(bg(), "", 10, write), "bad input counts as nothing")
	assert.Empty(t, logs.String(), "nothing logged for stale refusals")

	nop := func(context.Context, pgx.Tx) error { return nil }
	require.NoError(t, g.InTx(fence.WithClaim(bg(), fence.Claim{Token: 11, Run: "run-a"}), res, nop))
	err = g.InTx(fence.WithClaim(bg(), fence.Claim{Token: 11, Run: "run-b"}), res, nop)
	re, ok := fence.IsReused(err)
	require.True(t, ok, "%v", err)
	assert.Equal(t, fence.ReusedError{Resource: res, Token: 11, Run: "run-b", MarkRun: "run-a"}, *re)

	pts := mt.Collect()
	pg := map[string]string{"guard": "postgres"}
	require.EqualValues(t, 3, obstest.Value(pts, "fencekit.guard.accepted", pg))
	require.EqualValues(t, 2, obstest.Value(pts, "fencekit.guard.stale", pg))
	require.EqualValues(t, 1, obstest.Value(pts, "fencekit.guard.reused", pg))
	gap := obstest.Find(pts, "fencekit.guard.token_gap", pg)
	require.Len(t, gap, 1)
	require.EqualValues(t, 1, gap[0].Min, "10 − 9")
	require.EqualValues(t, 4, gap[0].Max, "10 − 6")
	for _, p := range pts {
		for _, v := range p.Attrs {
			require.NotEqual(t, res, v, "%s carries the resource", p.Name)
		}
	}
	line := logs.String()
	assert.Equal(t, 1, strings.Count(line, "\n"), "one record: %s", line)
	assert.Contains(t, line, `"level":"ERROR"`)
	assert.Contains(t, line, `"mark_run":"run-a"`)
	assert.Contains(t, line, `"run":"run-b"`)
}
