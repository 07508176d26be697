package leaseops_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/internal/obs/obstest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/leaseops"
)

// TestJanitorSweepSpan: a Sweep is one span, a child of the span in its
// ctx, with the rows it deleted and the statements it sent.
func TestJanitorSweepSpan(t *testing.T) {
	e := newEnv(t)
	m := e.manager(lease.Config{})
	spans := obstest.NewSpans(t)
	j, err := leaseops.NewJanitor(leaseops.JanitorConfig{Pool: fencetest.Pool(t), Schema: e.schema, TracerProvider: spans.Provider})
	require.NoError(t, err)
	t.Cleanup(func() { _ = j.Close() })
	l, err := m.Acquire(bg(), uniqueKey(t))
	require.NoError(t, err)
	_, err = l.Release(bg())
	require.NoError(t, err)
	e.age(l.Key(), 25*time.Hour)

	ctx, caller := spans.Start(bg(), "housekeeping")
	res, err := j.Sweep(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Deleted)
	got := spans.Ended("fencekit.lease.janitor_sweep")
	require.Len(t, got, 1)
	require.True(t, obstest.ChildOf(got[0], caller.SpanContext()))
	a := obstest.SpanAttrs(got[0])
	require.Equal(t, "1", a["fencekit.lease.janitor.leases_deleted"])
	require.Equal(t, "0", a["fencekit.lease.janitor.displaced_deleted"])
	require.Equal(t, "1", a["fencekit.lease.janitor.batches"])
	require.Equal(t, "false", a["fencekit.lease.janitor.more"])
	require.Equal(t, codes.Unset, got[0].Status().Code)
}
