package lease_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// TestFloorConfigInvalid: a misconfigured floor source is a *ConfigError
// naming the field, from New, before anything starts (TestMain's goleak
// check would see a started renewer) and before any statement is sent.
func TestFloorConfigInvalid(t *testing.T) {
	pool := fencetest.Pool(t)
	samedb := fencetest.Pool(t)
	other := fencetest.PoolWith(t, fencetest.DatabaseURL(), func(c *pgxpool.Config) { c.ConnConfig.Database = "postgres" })
	src := func(context.Context) (fence.Token, error) { return 1, nil }
	for _, tc := range []struct {
		name, field string
		floor       lease.FloorConfig
	}{
		{"negative gap", "Floor.Gap", lease.FloorConfig{Source: src, Gap: -1}},
		{"gap without a source", "Floor.Gap", lease.FloorConfig{Gap: 10}},
		{"marks schema without marks", "Floor.MarksSchema", lease.FloorConfig{MarksSchema: "app"}},
		{"marks in the lease pool", "Floor.Marks", lease.FloorConfig{Marks: pool}},
		{"marks in the lease database", "Floor.Marks", lease.FloorConfig{Marks: samedb}},
		{"bad marks schema", "Floor.MarksSchema", lease.FloorConfig{Marks: other, MarksSchema: `x"; DROP TABLE y; --`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := lease.New(lease.Config{Pool: pool, Floor: tc.floor})
			require.Nil(t, m)
			require.ErrorIs(t, err, lease.ErrInvalidConfig)
			var ce *lease.ConfigError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, tc.field, ce.Field)
		})
	}
	t.Run("bad marks schema is an identifier error", func(t *testing.T) {
		_, err := lease.New(lease.Config{Pool: pool, Floor: lease.FloorConfig{Marks: other, MarksSchema: "Bad"}})
		require.ErrorIs(t, err, migrations.ErrInvalidIdentifier)
	})
	t.Run("valid", func(t *testing.T) {
		for _, f := range []lease.FloorConfig{{}, {Source: lease.StaticFloor(5)}, {Source: src, Gap: 100}, {Marks: other}, {Marks: other, MarksSchema: "app", Source: lease.StaticFloor(3)}} {
			m, err := lease.New(lease.Config{Pool: pool, Floor: f})
			require.NoError(t, err)
			require.NoError(t, m.Close())
		}
	})
}
