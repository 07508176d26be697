package lease_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
)

// TestFloorConfigInvalid: a misconfigured floor source is a *fence.ConfigError
// naming the field, from New, before anything starts (TestMain's goleak
// check would see a started renewer) and before any statement is sent.
func TestFloorConfigInvalid(t *testing.T) {
	pool := fencetest.Pool(t)
	src := func(context.Context) (fence.Token, error) { return 1, nil }
	for _, tc := range []struct {
		name, field string
		floor       lease.FloorConfig
	}{
		{"negative gap", "Floor.Gap", lease.FloorConfig{Source: src, Gap: -1}},
		{"gap without a source", "Floor.Gap", lease.FloorConfig{Gap: 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := lease.New(lease.Config{Pool: pool, Floor: tc.floor})
			require.Nil(t, m)
			require.ErrorIs(t, err, fence.ErrInvalidConfig)
			var ce *fence.ConfigError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, tc.field, ce.Field)
		})
	}
	t.Run("valid", func(t *testing.T) {
		for _, f := range []lease.FloorConfig{{}, {Source: lease.StaticFloor(5)}, {Source: src, Gap: 100}, {Source: lease.MaxFloor(src, lease.StaticFloor(3))}} {
			m, err := lease.New(lease.Config{Pool: pool, Floor: f})
			require.NoError(t, err)
			require.NoError(t, m.Close())
		}
	})
}
