package pgguard_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/internal/obs/obstest"
	"github.com/fencekit/fencekit/sql/migrations"
)

// TestMarksPrune: marks of resources that are gone are deleted by name
// or by idleness, in bounded statements; a deleted mark lets an old token
// write again (the documented hazard), which is why only gone resources
// may be pruned.
func TestMarksPrune(t *testing.T) {
	schema := fencetest.Schema(t, migrations.Guard)
	pool := fencetest.Pool(t)
	g, err := pgguard.New(pgguard.Config{DB: pool, Schema: schema})
	require.NoError(t, err)
	mt := obstest.NewMeter(t)
	spans := obstest.NewSpans(t)
	gm, err := pgguard.NewMarks(pgguard.MarksConfig{DB: fencetest.Pool(t), Schema: schema, MeterProvider: mt.Provider, TracerProvider: spans.Provider})
	require.NoError(t, err)
	write := func(context.Context) error { return nil }
	h, err := gm.Highest(context.Background())
	require.NoError(t, err)
	require.Zero(t, h, "no marks")

	for i, r := range []string{"gone/1", "idle/2", "live/3", "live/4"} {
		require.NoError(t, g.Fence(context.Background(), r, fence.Token(10*(i+1)), write))
	}
	h, err = gm.Highest(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 40, h)

	n, err := gm.DeleteResources(context.Background(), []string{"gone/1", "never/existed"})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	mark, err := g.Mark(context.Background(), "gone/1")
	require.NoError(t, err)
	require.Zero(t, mark.Token)
	require.NoError(t, g.Fence(context.Background(), "gone/1", 1, write), "the hazard: a deleted mark.Token admits any token")

	_, err = pool.Exec(context.Background(), fmt.Sprintf(`UPDATE %q.fencekit_guard_marks SET updated_at = clock_timestamp() - interval '2 hours' WHERE resource = 'idle/2'`, schema))
	require.NoError(t, err)
	n, err = gm.DeleteIdle(context.Background(), time.Hour, 10)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	for _, r := range []string{"live/3", "live/4"} {
		mark, err := g.Mark(context.Background(), r)
		require.NoError(t, err)
		require.Positive(t, mark.Token, "%s kept", r)
	}
	deletes := spans.Ended("fencekit.guard.marks_delete")
	require.Len(t, deletes, 2, "one span per delete statement")
	for _, sp := range deletes {
		a := obstest.SpanAttrs(sp)
		require.Equal(t, "1", a["fencekit.guard.marks.deleted_count"])
		require.Equal(t, "postgres", a["fencekit.guard.kind"])
	}
	require.EqualValues(t, 2, obstest.Value(mt.Collect(), "fencekit.guard.marks.deleted", map[string]string{"guard": "postgres"}))

	// Bad input changes nothing.
	_, err = gm.DeleteResources(context.Background(), []string{"live/3", ""})
	require.ErrorIs(t, err, pgguard.ErrInvalidArgument)
	_, err = gm.DeleteResources(context.Background(), make([]string, pgguard.MaxMarksBatch+1))
	require.ErrorIs(t, err, pgguard.ErrInvalidArgument)
	_, err = gm.DeleteIdle(context.Background(), time.Minute, 10)
	require.ErrorIs(t, err, pgguard.ErrInvalidArgument)
	_, err = gm.DeleteIdle(context.Background(), time.Hour, 0)
	require.ErrorIs(t, err, pgguard.ErrInvalidArgument)
	mark, err = g.Mark(context.Background(), "live/3")
	require.NoError(t, err)
	require.EqualValues(t, 30, mark.Token)
	_, err = pgguard.NewMarks(pgguard.MarksConfig{})
	require.ErrorIs(t, err, fence.ErrInvalidConfig)
	_, err = pgguard.NewMarks(pgguard.MarksConfig{DB: pool, Schema: "x;y"})
	require.ErrorIs(t, err, fence.ErrInvalidConfig)
}
