package migrations_test

import (
	"context"
	"fmt"
	"io/fs"
	"sort"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/sql/migrations"
)

// catalog describes every object of schema: relations with their columns,
// constraints, indexes, functions, triggers and the floor table's grants,
// one line each, sorted. Two schemas with equal catalogs hold the same
// objects.
func catalog(t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
SELECT 'rel ' || c.relname || ' ' || c.relkind::text
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1
UNION ALL
SELECT 'col ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull::text
  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = $1 AND a.attnum > 0 AND NOT a.attisdropped AND c.relkind = 'r'
UNION ALL
SELECT 'con ' || co.conname || ' ' || pg_get_constraintdef(co.oid)
  FROM pg_constraint co JOIN pg_namespace n ON n.oid = co.connamespace WHERE n.nspname = $1
UNION ALL
SELECT 'fn ' || p.proname || ' ' || p.prosecdef::text
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1
UNION ALL
SELECT 'trg ' || tg.tgname
  FROM pg_trigger tg JOIN pg_class c ON c.oid = tg.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = $1 AND NOT tg.tgisinternal
UNION ALL
SELECT 'acl ' || c.relname || ' ' || coalesce(array_to_string(c.relacl, ','), '')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = $1 AND c.relname = 'fencekit_token_floor'`, schema)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	sort.Strings(out)
	return out
}

// applyToolDown runs the golang-migrate down files of set for the given
// versions (in the order given) in schema, as the tool would.
func applyToolDown(t *testing.T, pool *pgxpool.Pool, schema string, set migrations.Set, versions ...int) {
	t.Helper()
	ctx := context.Background()
	fsys, err := migrations.ToolFS(migrations.GolangMigrate, set)
	require.NoError(t, err)
	for _, v := range versions {
		names, err := fs.Glob(fsys, fmt.Sprintf("%04d_*.down.sql", v))
		require.NoError(t, err)
		require.Len(t, names, 1)
		b, err := fs.ReadFile(fsys, names[0])
		require.NoError(t, err)
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "SELECT set_config('search_path', $1, true)", `"`+schema+`"`)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, string(b))
		require.NoError(t, err, names[0])
		require.NoError(t, tx.Commit(ctx))
	}
}

// TestDownMatchesToolFiles: Down leaves the schema exactly as the
// golang-migrate down files do, step by step from the top to nothing, and
// Migrate brings a reverted schema back to the full one.
func TestDownMatchesToolFiles(t *testing.T) {
	ctx := context.Background()
	pool := fencetest.Pool(t)
	lease, err := migrations.Migrations(migrations.Lease)
	require.NoError(t, err)
	guard, err := migrations.Migrations(migrations.Guard)
	require.NoError(t, err)
	a := fencetest.Schema(t) // reverted with Down
	b := fencetest.Schema(t) // reverted with the tool files
	full := catalog(t, pool, a)
	require.Greater(t, len(full), 30, "the catalog lists the objects: %v", full)
	require.Equal(t, full, catalog(t, pool, b))

	for _, step := range []struct {
		set migrations.Set
		to  int
	}{{migrations.Lease, len(lease) - 1}, {migrations.Lease, 3}, {migrations.Guard, 1}, {migrations.Lease, 0}, {migrations.Guard, 0}} {
		before, err := migrations.Status(ctx, pool, migrations.Options{Schema: a}, step.set)
		require.NoError(t, err)
		got, err := migrations.Down(ctx, pool, migrations.Options{Schema: a}, step.set, step.to)
		require.NoError(t, err)
		var want []int
		for v := before[0].Current(); v > step.to; v-- {
			want = append(want, v)
		}
		require.Equal(t, want, got, "%s down to %d", step.set, step.to)
		applyToolDown(t, pool, b, step.set, want...)
		require.Equal(t, catalog(t, pool, b), catalog(t, pool, a), "%s down to %d", step.set, step.to)
		after, err := migrations.Status(ctx, pool, migrations.Options{Schema: a}, step.set)
		require.NoError(t, err)
		require.Equal(t, step.to, after[0].Current())
	}
	assert.Empty(t, catalog(t, pool, a), "all the way down leaves nothing of fencekit behind")

	// Down again: nothing to revert, no version table, no error.
	got, err := migrations.Down(ctx, pool, migrations.Options{Schema: a}, migrations.Lease, 0)
	require.NoError(t, err)
	assert.Empty(t, got)

	applied, err := migrations.Migrate(ctx, pool, migrations.Options{Schema: a})
	require.NoError(t, err)
	assert.Len(t, applied[migrations.Lease], len(lease))
	assert.Len(t, applied[migrations.Guard], len(guard))
	assert.Equal(t, full, catalog(t, pool, a), "up after down restores the full schema")
}

// TestDownPartial: a partial Down keeps the versions at or below the
// target, Validate reports exactly the reverted ones missing, and Migrate
// re-applies them.
func TestDownPartial(t *testing.T) {
	ctx := context.Background()
	pool := fencetest.Pool(t)
	lease, err := migrations.Migrations(migrations.Lease)
	require.NoError(t, err)
	schema := fencetest.Schema(t)
	top := lease[len(lease)-1].Version

	got, err := migrations.Down(ctx, pool, migrations.Options{Schema: schema}, migrations.Lease, top-2)
	require.NoError(t, err)
	require.Equal(t, []int{top, top - 1}, got)
	err = migrations.Validate(ctx, pool, migrations.Options{Schema: schema})
	var ne *migrations.NotMigratedError
	require.ErrorAs(t, err, &ne)
	assert.Equal(t, map[migrations.Set][]int{migrations.Lease: {top - 1, top}}, ne.Missing)

	// A target at or above the current version reverts nothing.
	got, err = migrations.Down(ctx, pool, migrations.Options{Schema: schema}, migrations.Lease, top+10)
	require.NoError(t, err)
	assert.Empty(t, got)

	applied, err := migrations.Migrate(ctx, pool, migrations.Options{Schema: schema})
	require.NoError(t, err)
	assert.Equal(t, map[migrations.Set][]int{migrations.Lease: {top - 1, top}}, applied)
	require.NoError(t, migrations.Validate(ctx, pool, migrations.Options{Schema: schema}))
}

// TestDownRefusals: a negative target, a bad schema name, an unknown set
// and versions this build does not embed are refused and change nothing;
// a schema that does not exist is not created.
func TestDownRefusals(t *testing.T) {
	ctx := context.Background()
	pool := fencetest.Pool(t)
	schema := fencetest.Schema(t)
	full := catalog(t, pool, schema)

	_, err := migrations.Down(ctx, pool, migrations.Options{Schema: schema}, migrations.Lease, -1)
	require.ErrorIs(t, err, migrations.ErrInvalidVersion)
	_, err = migrations.Down(ctx, pool, migrations.Options{Schema: `a"b`}, migrations.Lease, 0)
	require.ErrorIs(t, err, migrations.ErrInvalidIdentifier)
	_, err = migrations.Down(ctx, pool, migrations.Options{Schema: schema}, "nope", 0)
	require.Error(t, err)
	_, err = migrations.Down(ctx, nil, migrations.Options{Schema: schema}, migrations.Lease, 0)
	require.Error(t, err)
	require.Equal(t, full, catalog(t, pool, schema))

	_, err = pool.Exec(ctx, `INSERT INTO "`+schema+`".fencekit_schema_migrations (set_name, version, name) VALUES ('lease', 99, 'future')`)
	require.NoError(t, err)
	full = catalog(t, pool, schema)
	_, err = migrations.Down(ctx, pool, migrations.Options{Schema: schema}, migrations.Lease, 0)
	var ue *migrations.UnknownVersionError
	require.ErrorAs(t, err, &ue)
	require.ErrorIs(t, err, migrations.ErrUnknownVersion)
	assert.Equal(t, []int{99}, ue.Versions)
	assert.Contains(t, err.Error(), "0099")
	require.Equal(t, full, catalog(t, pool, schema), "a refused Down reverts nothing")
	st, err := migrations.Status(ctx, pool, migrations.Options{Schema: schema}, migrations.Lease)
	require.NoError(t, err)
	assert.Equal(t, []int{99}, st[0].Unknown)

	missing := fencetest.RandomName("fk_down_")
	got, err := migrations.Down(ctx, pool, migrations.Options{Schema: missing}, migrations.Guard, 0)
	require.NoError(t, err)
	assert.Empty(t, got)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, missing).Scan(&n))
	assert.Zero(t, n, "Down creates no schema")
}

// TestStatus: a missing schema has everything pending; versions applied by
// the tool files and by Migrate are listed with names and times; sets come
// back in the order asked.
func TestStatus(t *testing.T) {
	ctx := context.Background()
	pool := fencetest.Pool(t)
	lease, err := migrations.Migrations(migrations.Lease)
	require.NoError(t, err)
	guard, err := migrations.Migrations(migrations.Guard)
	require.NoError(t, err)

	missing := fencetest.RandomName("fk_status_")
	st, err := migrations.Status(ctx, pool, migrations.Options{Schema: missing})
	require.NoError(t, err)
	require.Len(t, st, 2)
	assert.Equal(t, migrations.Lease, st[0].Set)
	assert.Equal(t, versions(t, migrations.Lease), st[0].Pending)
	assert.Empty(t, st[0].Applied)
	assert.Zero(t, st[0].Current())
	assert.Equal(t, versions(t, migrations.Guard), st[1].Pending)

	part := fencetest.RandomName("fk_status_")
	_, err = pool.Exec(ctx, `CREATE SCHEMA "`+part+`"`)
	require.NoError(t, err)
	t.Cleanup(func() { _ = migrations.DropSchema(context.Background(), pool, part) })
	applyUp(t, pool, part, migrations.Lease, 2)
	st, err = migrations.Status(ctx, pool, migrations.Options{Schema: part}, migrations.Guard, migrations.Lease)
	require.NoError(t, err)
	require.Len(t, st, 2)
	assert.Equal(t, migrations.Guard, st[0].Set)
	assert.Equal(t, versions(t, migrations.Guard), st[0].Pending)
	assert.Equal(t, 2, st[1].Current())
	assert.Equal(t, versions(t, migrations.Lease)[2:], st[1].Pending)
	require.Len(t, st[1].Applied, 2)
	assert.Equal(t, lease[1].Name, st[1].Applied[1].Name)
	assert.False(t, st[1].Applied[1].AppliedAt.IsZero())

	full := fencetest.Schema(t)
	st, err = migrations.Status(ctx, pool, migrations.Options{Schema: full})
	require.NoError(t, err)
	assert.Empty(t, st[0].Pending)
	assert.Empty(t, st[1].Pending)
	assert.Equal(t, lease[len(lease)-1].Version, st[0].Current())
	assert.Equal(t, guard[len(guard)-1].Version, st[1].Current())

	_, err = migrations.Status(ctx, pool, migrations.Options{Schema: "Bad"})
	assert.ErrorIs(t, err, migrations.ErrInvalidIdentifier)
	_, err = migrations.Status(ctx, pool, migrations.Options{Schema: full}, "nope")
	assert.Error(t, err)
	_, err = migrations.Status(ctx, nil, migrations.Options{})
	assert.Error(t, err)
}
