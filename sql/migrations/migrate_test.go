package migrations_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/sql/migrations"
)

func TestValidateIdentifier(t *testing.T) {
	for _, ok := range []string{"public", "fk_1", "_x", "a23456789012345678901234567890123456789012345678901234567890123"} {
		assert.NoError(t, migrations.ValidateIdentifier(ok), ok)
	}
	for _, bad := range []string{"", "Public", "1abc", "a-b", "a b", `a"b`, "a;drop table x", "pg_catalog",
		"a\x00", "ä", "a234567890123456789012345678901234567890123456789012345678901234", "x'--"} {
		assert.ErrorIs(t, migrations.ValidateIdentifier(bad), migrations.ErrInvalidIdentifier, "%q", bad)
	}
}

func TestMigrationsEmbedded(t *testing.T) {
	for _, set := range []migrations.Set{migrations.Lease, migrations.Guard} {
		ms, err := migrations.Migrations(set)
		require.NoError(t, err)
		require.NotEmpty(t, ms)
		require.Equal(t, 1, ms[0].Version, "versions start at 1")
		for i, m := range ms {
			// Contiguous: Migrate applies the versions above the highest
			// recorded one, so a gap filled later would never be applied.
			assert.Equal(t, i+1, m.Version, "versions are contiguous")
			assert.NotEmpty(t, m.Up)
			assert.NotEmpty(t, m.Down)
		}
	}
	_, err := migrations.Migrations("nope")
	assert.Error(t, err)
}

func TestMigrateRejectsBadSchema(t *testing.T) {
	pool := fencetest.Pool(t)
	_, err := migrations.Migrate(context.Background(), pool, migrations.Options{Schema: `x"; DROP TABLE y; --`})
	assert.ErrorIs(t, err, migrations.ErrInvalidIdentifier)
	_, err = migrations.Migrate(context.Background(), nil, migrations.Options{})
	assert.Error(t, err)
	assert.Error(t, migrations.DropSchema(context.Background(), pool, "public"))
}

// Several processes' worth of independent pools migrate the same schema at
// once: exactly one applies each version, the rest find nothing to do, and a
// later run is a no-op.
func TestMigrateConcurrentAndIdempotent(t *testing.T) {
	schema := fencetest.RandomName("fk_mig_")
	admin := fencetest.Pool(t)
	t.Cleanup(func() { _ = migrations.DropSchema(context.Background(), admin, schema) })

	const n = 6
	results := make([]map[migrations.Set][]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		pool := fencetest.Pool(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			results[i], errs[i] = migrations.Migrate(ctx, pool, migrations.Options{Schema: schema})
		}()
	}
	close(start)
	wg.Wait()
	appliedBy := 0
	for i := 0; i < n; i++ {
		require.NoError(t, errs[i])
		if len(results[i]) > 0 {
			appliedBy++
			assert.Equal(t, versions(t, migrations.Lease), results[i][migrations.Lease])
			assert.Equal(t, versions(t, migrations.Guard), results[i][migrations.Guard])
		}
	}
	assert.Equal(t, 1, appliedBy, "exactly one migrator applies the versions")

	again, err := migrations.Migrate(context.Background(), admin, migrations.Options{Schema: schema})
	require.NoError(t, err)
	assert.Empty(t, again)

	var seq string
	require.NoError(t, admin.QueryRow(context.Background(),
		`SELECT format('%s/%s/%s', cache_size, cycle, increment_by) FROM pg_sequences WHERE schemaname = $1 AND sequencename = 'fencekit_token_seq'`,
		schema).Scan(&seq))
	assert.Equal(t, "1/f/1", seq, "token sequence must be CACHE 1, NO CYCLE")
}

// versions lists every embedded version of set, in order.
func versions(t *testing.T, set migrations.Set) []int {
	t.Helper()
	ms, err := migrations.Migrations(set)
	require.NoError(t, err)
	var out []int
	for _, m := range ms {
		out = append(out, m.Version)
	}
	return out
}
