package cli_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/sql/migrations"
)

// nums turns a JSON array of numbers into ints.
func nums(t *testing.T, v any) []int {
	t.Helper()
	arr, ok := v.([]any)
	require.True(t, ok, "not an array: %v", v)
	out := []int{}
	for _, x := range arr {
		out = append(out, int(x.(float64)))
	}
	return out
}

// TestMigrateCommands drives migrate status, validate, up and down through
// the binary on a private schema, each result checked against the library's
// Status: a missing schema has everything pending and fails validate (exit
// 1 naming the versions); up applies both sets; down reverts one step by
// default, to --to N, and the whole set with --to 0, through the tool
// files' down scripts, leaving nothing behind.
func TestMigrateCommands(t *testing.T) {
	pool := fencetest.Pool(t)
	schema := fencetest.RandomName("fk_cli_")
	t.Cleanup(func() { _ = migrations.DropSchema(bg(), pool, schema) })
	env := db(fencetest.DatabaseURL())
	lease := versionsOf(t, migrations.Lease)
	guard := versionsOf(t, migrations.Guard)
	top := lease[len(lease)-1]
	status := func(set migrations.Set) migrations.SetStatus {
		st, err := migrations.Status(bg(), pool, migrations.Options{Schema: schema}, set)
		require.NoError(t, err)
		return st[0]
	}

	r := fk(t, env, "migrate", "status", "--schema", schema, "--json")
	require.Equal(t, 0, r.code, "%s", r)
	ls := r.lines(t)
	require.Len(t, ls, 2)
	require.Equal(t, "lease", ls[0]["set"])
	require.Equal(t, lease, nums(t, ls[0]["pending"]))
	require.Equal(t, guard, nums(t, ls[1]["pending"]))
	require.EqualValues(t, 0, ls[0]["current"])

	r = fk(t, env, "--json", "--schema", schema, "migrate", "validate")
	require.Equal(t, 1, r.code, "%s", r)
	ls = r.lines(t)
	require.Len(t, ls, 2, "the report, then the error")
	require.Equal(t, false, ls[0]["ok"])
	require.Equal(t, lease, nums(t, ls[0]["missing"].(map[string]any)["lease"]))
	require.EqualValues(t, 1, ls[1]["exit_code"])
	require.Contains(t, r.stderr, "lease set missing 0001")

	r = fk(t, env, "migrate", "up", "--schema", schema, "--json")
	require.Equal(t, 0, r.code, "%s", r)
	ls = r.lines(t)
	require.Len(t, ls, 2)
	require.Equal(t, lease, nums(t, ls[0]["changed"]))
	require.Equal(t, guard, nums(t, ls[1]["changed"]))
	require.Equal(t, top, status(migrations.Lease).Current())
	r = fk(t, env, "migrate", "up", "--schema", schema)
	require.Equal(t, 0, r.code, "%s", r)
	require.Contains(t, r.stdout, "lease set: up to date at version")
	r = fk(t, env, "migrate", "validate", "--schema", schema)
	require.Equal(t, 0, r.code, "%s", r)

	r = fk(t, env, "migrate", "down", "--set", "lease", "--schema", schema, "--json")
	require.Equal(t, 0, r.code, "%s", r)
	j := r.one(t)
	require.Equal(t, []int{top}, nums(t, j["changed"]))
	require.EqualValues(t, top-1, j["current"])
	require.Equal(t, top-1, status(migrations.Lease).Current())

	r = fk(t, env, "migrate", "down", "--set", "lease", "--to", "3", "--schema", schema, "--json")
	require.Equal(t, 0, r.code, "%s", r)
	var want []int
	for v := top - 1; v > 3; v-- {
		want = append(want, v)
	}
	require.Equal(t, want, nums(t, r.one(t)["changed"]))
	require.Equal(t, 3, status(migrations.Lease).Current())
	r = fk(t, env, "migrate", "validate", "--set", "lease", "--schema", schema)
	require.Equal(t, 1, r.code, "%s", r)
	require.Contains(t, r.stderr, "lease set missing 0004")

	r = fk(t, env, "migrate", "up", "--set", "lease", "--schema", schema, "--json")
	require.Equal(t, 0, r.code, "%s", r)
	require.Equal(t, lease[3:], nums(t, r.one(t)["changed"]))

	// The mcp set (mcpfence's kept call results) is applied when named,
	// never as part of all.
	mcp := versionsOf(t, migrations.MCP)
	r = fk(t, env, "migrate", "up", "--set", "mcp", "--schema", schema, "--json")
	require.Equal(t, 0, r.code, "%s", r)
	require.Equal(t, mcp, nums(t, r.one(t)["changed"]))
	require.Equal(t, mcp[len(mcp)-1], status(migrations.MCP).Current())

	for _, set := range []string{"mcp", "guard", "lease"} {
		r = fk(t, env, "migrate", "down", "--set", set, "--to", "0", "--schema", schema)
		require.Equal(t, 0, r.code, "%s", r)
		require.Contains(t, r.stdout, set+" set: reverted")
	}
	var n int
	require.NoError(t, pool.QueryRow(bg(), `SELECT count(*) FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = $1`, schema).Scan(&n))
	require.Zero(t, n, "all the way down leaves nothing behind")
	r = fk(t, env, "migrate", "down", "--set", "lease", "--to", "0", "--schema", schema)
	require.Equal(t, 0, r.code, "%s", r)
	require.Contains(t, r.stdout, "nothing to revert")
}

func versionsOf(t *testing.T, set migrations.Set) []int {
	t.Helper()
	ms, err := migrations.Migrations(set)
	require.NoError(t, err)
	var out []int
	for _, m := range ms {
		out = append(out, m.Version)
	}
	return out
}
