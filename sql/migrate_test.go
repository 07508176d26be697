package sql_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/internal/testsvc"
	fsql "github.com/fencekit/fencekit/sql"
)

func TestValidateIdentifier(t *testing.T) {
	for _, ok := range []string{"public", "fk_1", "_x", "a23456789012345678901234567890123456789012345678901234567890123"} {
		assert.NoError(t, fsql.ValidateIdentifier(ok), ok)
	}
	for _, bad := range []string{"", "Public", "1abc", "a-b", "a b", `a"b`, "a;drop table x", "pg_catalog",
		"a\x00", "ä", "a234567890123456789012345678901234567890123456789012345678901234", "x'--"} {
		assert.ErrorIs(t, fsql.ValidateIdentifier(bad), fsql.ErrInvalidIdentifier, "%q", bad)
	}
}

func TestMigrationsEmbedded(t *testing.T) {
	for _, set := range []fsql.Set{fsql.Lease, fsql.Guard} {
		ms, err := fsql.Migrations(set)
		require.NoError(t, err)
		require.NotEmpty(t, ms)
		for i, m := range ms {
			assert.Equal(t, i+1, m.Version, "versions are contiguous from 1")
			assert.NotEmpty(t, m.Up)
			assert.NotEmpty(t, m.Down)
		}
	}
	_, err := fsql.Migrations("nope")
	assert.Error(t, err)
}

func TestMigrateRejectsBadSchema(t *testing.T) {
	pool := testsvc.Pool(t)
	_, err := fsql.Migrate(context.Background(), pool, fsql.Options{Schema: `x"; DROP TABLE y; --`})
	assert.ErrorIs(t, err, fsql.ErrInvalidIdentifier)
	_, err = fsql.Migrate(context.Background(), nil, fsql.Options{})
	assert.Error(t, err)
	assert.Error(t, fsql.DropSchema(context.Background(), pool, "public"))
}

// Several processes' worth of independent pools migrate the same schema at
// once: exactly one applies each version, the rest find nothing to do, and a
// later run is a no-op.
func TestMigrateConcurrentAndIdempotent(t *testing.T) {
	schema := testsvc.RandomName("fk_mig_")
	admin := testsvc.Pool(t)
	t.Cleanup(func() { _ = fsql.DropSchema(context.Background(), admin, schema) })

	const n = 6
	results := make([]map[fsql.Set][]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		pool := testsvc.Pool(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			results[i], errs[i] = fsql.Migrate(ctx, pool, fsql.Options{Schema: schema})
		}()
	}
	close(start)
	wg.Wait()
	appliedBy := 0
	for i := 0; i < n; i++ {
		require.NoError(t, errs[i])
		if len(results[i]) > 0 {
			appliedBy++
			assert.Equal(t, versions(t, fsql.Lease), results[i][fsql.Lease])
			assert.Equal(t, versions(t, fsql.Guard), results[i][fsql.Guard])
		}
	}
	assert.Equal(t, 1, appliedBy, "exactly one migrator applies the versions")

	again, err := fsql.Migrate(context.Background(), admin, fsql.Options{Schema: schema})
	require.NoError(t, err)
	assert.Empty(t, again)

	var seq string
	require.NoError(t, admin.QueryRow(context.Background(),
		`SELECT format('%s/%s/%s', cache_size, cycle, increment_by) FROM pg_sequences WHERE schemaname = $1 AND sequencename = 'fencekit_token_seq'`,
		schema).Scan(&seq))
	assert.Equal(t, "1/f/1", seq, "token sequence must be CACHE 1, NO CYCLE")
}

// versions lists every embedded version of set, in order.
func versions(t *testing.T, set fsql.Set) []int {
	t.Helper()
	ms, err := fsql.Migrations(set)
	require.NoError(t, err)
	var out []int
	for _, m := range ms {
		out = append(out, m.Version)
	}
	return out
}
