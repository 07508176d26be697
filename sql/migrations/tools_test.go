package migrations_test

import (
	"context"
	"errors"
	"io/fs"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/sql/migrations"
)

// TestToolFilesUpToDate fails when a migration was added or changed without
// regenerating the goose and golang-migrate files (go generate
// ./sql/migrations).
func TestToolFilesUpToDate(t *testing.T) {
	stale, err := migrations.StaleToolFiles()
	require.NoError(t, err)
	assert.Empty(t, stale, "run `go generate ./sql/migrations` (make migrations): these tool files are missing, differ or are left over")
	files, err := migrations.ToolFiles()
	require.NoError(t, err)
	for _, set := range []migrations.Set{migrations.Lease, migrations.Guard} {
		ms, err := migrations.Migrations(set)
		require.NoError(t, err)
		for _, tool := range []migrations.Tool{migrations.Goose, migrations.GolangMigrate} {
			fsys, err := migrations.ToolFS(tool, set)
			require.NoError(t, err)
			names, err := fs.Glob(fsys, "*.sql")
			require.NoError(t, err)
			per := 1
			if tool == migrations.GolangMigrate {
				per = 2
			}
			assert.Len(t, names, per*len(ms), "%s/%s", tool, set)
		}
	}
	// goose needs its annotations, and the plpgsql bodies inside one
	// statement block.
	for p, b := range files {
		if strings.HasPrefix(p, "goose/") {
			s := string(b)
			assert.Equal(t, 1, strings.Count(s, "-- +goose Up\n"), p)
			assert.Equal(t, 1, strings.Count(s, "-- +goose Down\n"), p)
			assert.Equal(t, 2, strings.Count(s, "-- +goose StatementBegin\n"), p)
			assert.Equal(t, 2, strings.Count(s, "-- +goose StatementEnd\n"), p)
		}
	}
	_, err = migrations.ToolFS("flyway", migrations.Lease)
	assert.Error(t, err)
	_, err = migrations.ToolFS(migrations.Goose, "nope")
	assert.Error(t, err)
}

// applyUp runs the golang-migrate up files of set up to version upto in
// schema, as a tool would (search_path set, one file per transaction).
func applyUp(t *testing.T, pool interface {
	Begin(context.Context) (pgx.Tx, error)
}, schema string, set migrations.Set, upto int) {
	t.Helper()
	ctx := context.Background()
	fsys, err := migrations.ToolFS(migrations.GolangMigrate, set)
	require.NoError(t, err)
	names, err := fs.Glob(fsys, "*.up.sql")
	require.NoError(t, err)
	sort.Strings(names)
	for i, n := range names {
		if i >= upto {
			break
		}
		b, err := fs.ReadFile(fsys, n)
		require.NoError(t, err)
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "SELECT set_config('search_path', $1, true)", `"`+schema+`"`)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, string(b))
		require.NoError(t, err, n)
		require.NoError(t, tx.Commit(ctx))
	}
}

func TestValidate(t *testing.T) {
	ctx := context.Background()
	pool := fencetest.Pool(t)
	lease, err := migrations.Migrations(migrations.Lease)
	require.NoError(t, err)
	guard, err := migrations.Migrations(migrations.Guard)
	require.NoError(t, err)
	versions := func(ms []migrations.Migration, from int) []int {
		var out []int
		for _, m := range ms[from:] {
			out = append(out, m.Version)
		}
		return out
	}

	// An empty schema misses everything.
	empty := fencetest.RandomName("fk_val_")
	_, err = pool.Exec(ctx, `CREATE SCHEMA "`+empty+`"`)
	require.NoError(t, err)
	t.Cleanup(func() { _ = migrations.DropSchema(context.Background(), pool, empty) })
	err = migrations.Validate(ctx, pool, migrations.Options{Schema: empty})
	var ne *migrations.NotMigratedError
	require.ErrorAs(t, err, &ne)
	assert.ErrorIs(t, err, migrations.ErrNotMigrated)
	assert.Equal(t, map[migrations.Set][]int{migrations.Lease: versions(lease, 0), migrations.Guard: versions(guard, 0)}, ne.Missing)

	// Partly migrated by tool files: lease 1..2 only, no guard set.
	part := fencetest.RandomName("fk_val_")
	_, err = pool.Exec(ctx, `CREATE SCHEMA "`+part+`"`)
	require.NoError(t, err)
	t.Cleanup(func() { _ = migrations.DropSchema(context.Background(), pool, part) })
	applyUp(t, pool, part, migrations.Lease, 2)
	err = migrations.Validate(ctx, pool, migrations.Options{Schema: part})
	require.ErrorAs(t, err, &ne)
	assert.Equal(t, map[migrations.Set][]int{migrations.Lease: versions(lease, 2), migrations.Guard: versions(guard, 0)}, ne.Missing)
	assert.Contains(t, err.Error(), "lease set missing 0003")
	assert.Contains(t, err.Error(), "guard set missing 0001")
	// Only the guard set asked for: lease's state does not matter.
	applyUp(t, pool, part, migrations.Guard, len(guard))
	require.NoError(t, migrations.Validate(ctx, pool, migrations.Options{Schema: part}, migrations.Guard))
	// The rest of the lease set by the tool files: valid.
	applyUp(t, pool, part, migrations.Lease, len(lease)) // versions 1..2 again: idempotent files
	require.NoError(t, migrations.Validate(ctx, pool, migrations.Options{Schema: part}))

	// Migrate's own schema validates; a lost version row is reported.
	full := fencetest.Schema(t, migrations.Lease, migrations.Guard)
	require.NoError(t, migrations.Validate(ctx, pool, migrations.Options{Schema: full}))
	last := lease[len(lease)-1].Version
	_, err = pool.Exec(ctx, `DELETE FROM "`+full+`".fencekit_schema_migrations WHERE set_name = 'lease' AND version = $1`, last)
	require.NoError(t, err)
	err = migrations.Validate(ctx, pool, migrations.Options{Schema: full}, migrations.Lease)
	require.ErrorAs(t, err, &ne)
	assert.Equal(t, map[migrations.Set][]int{migrations.Lease: {last}}, ne.Missing)

	// Bad input.
	assert.ErrorIs(t, migrations.Validate(ctx, pool, migrations.Options{Schema: `x"y`}), migrations.ErrInvalidIdentifier)
	assert.Error(t, migrations.Validate(ctx, nil, migrations.Options{}))
	err = migrations.Validate(ctx, pool, migrations.Options{Schema: full}, "nope")
	assert.Error(t, err)
	assert.False(t, errors.Is(err, migrations.ErrNotMigrated))
}
