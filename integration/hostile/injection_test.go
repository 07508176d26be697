package hostile

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/sql/migrations"
)

// injections are strings that would change a statement if they were pasted
// into SQL, plus names that are merely invalid identifiers.
var injections = []string{
	`public; DROP TABLE canary; --`,
	`public"; DROP TABLE canary; --`,
	`x" CASCADE; DROP SCHEMA public; --`,
	`'; DROP TABLE canary; --`,
	`public.canary`,
	`pg_catalog`,
	`pg_temp`,
	`Public`,
	`a b`,
	`a-b`,
	`$1`,
	`x\`,
	"x\x00y",
	"x\ny",
	`ｐｕｂｌｉｃ`,
	strings.Repeat("a", 64),
	`"quoted"`,
	`1abc`,
}

// canary creates a table whose survival proves no injected statement ran,
// and returns a check that the table still exists and that no schema named
// after an injection string appeared or vanished. (Other tests create
// schemas concurrently, so only these names are compared.)
func canary(t *testing.T, pool *pgxpool.Pool) (check func()) {
	t.Helper()
	ctx := testCtx(t)
	name := fencetest.RandomName("fk_canary_")
	_, err := pool.Exec(ctx, `CREATE TABLE `+name+` (x int)`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+name) })
	names := []string{"fk_evil_schema"}
	for _, inj := range injections {
		if !strings.ContainsRune(inj, 0) { // PostgreSQL text cannot hold NUL
			names = append(names, inj)
		}
	}
	present := func() []string {
		rows, err := pool.Query(ctx, `SELECT nspname FROM pg_namespace WHERE nspname::text = ANY($1::text[]) ORDER BY nspname`, names)
		require.NoError(t, err)
		var out []string
		for rows.Next() {
			var n string
			require.NoError(t, rows.Scan(&n))
			out = append(out, n)
		}
		require.NoError(t, rows.Err())
		return out
	}
	before := present()
	return func() {
		t.Helper()
		var exists bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, "public."+name).Scan(&exists))
		assert.True(t, exists, "canary table dropped")
		assert.Equal(t, before, present(), "a schema named after an injection string was created or dropped")
	}
}

// TestInjectionThroughIdentifiers passes every injection string as each
// configurable identifier: migrations.Migrate's schema, pgguard's schema, the
// role helpers. Each is refused with an error matching
// sql.ErrInvalidIdentifier (wrapped by the package's config error) before
// any statement is sent.
func TestInjectionThroughIdentifiers(t *testing.T) {
	pool := fencetest.Pool(t)
	check := canary(t, pool)
	ctx := testCtx(t)
	for _, inj := range injections {
		_, err := migrations.Migrate(ctx, pool, migrations.Options{Schema: inj}, migrations.Lease, migrations.Guard)
		assert.ErrorIs(t, err, migrations.ErrInvalidIdentifier, "Migrate(%q)", inj)
		_, err = migrations.QuoteIdentifier(inj)
		assert.ErrorIs(t, err, migrations.ErrInvalidIdentifier, "QuoteIdentifier(%q)", inj)
		assert.ErrorIs(t, migrations.DropSchema(ctx, pool, inj), migrations.ErrInvalidIdentifier, "DropSchema(%q)", inj)

		_, err = pgguard.New(pgguard.Config{DB: pool, Schema: inj})
		assert.ErrorIs(t, err, fence.ErrInvalidConfig, "pgguard.New(%q)", inj)
		assert.ErrorIs(t, err, migrations.ErrInvalidIdentifier, "pgguard.New(%q)", inj)

		_, err = Grants(inj, "r")
		assert.ErrorIs(t, err, migrations.ErrInvalidIdentifier)
		assert.ErrorIs(t, CreateRole(ctx, pool, "public", inj), migrations.ErrInvalidIdentifier)
	}
	check()
}

// TestInjectionThroughValues passes injection strings as bound values:
// resource names of the PostgreSQL guard. They are stored verbatim and
// nothing else happens.
func TestInjectionThroughValues(t *testing.T) {
	schema := fencetest.Schema(t, migrations.Guard)
	pool := fencetest.Pool(t)
	check := canary(t, pool)
	ctx := testCtx(t)
	g, err := pgguard.New(pgguard.Config{DB: pool, Schema: schema})
	require.NoError(t, err)
	var valid []string
	for _, inj := range injections {
		if strings.ContainsAny(inj, "\x00\n") {
			continue // not valid resource names; the bad-input table covers them
		}
		valid = append(valid, inj)
		require.NoError(t, g.Fence(ctx, inj, 3, func(context.Context) error { return nil }), "%q", inj)
		mark, err := g.Mark(ctx, inj)
		require.NoError(t, err)
		assert.EqualValues(t, 3, mark.Token, "%q", inj)
	}
	rows, err := pool.Query(ctx, `SELECT resource FROM "`+schema+`".fencekit_guard_marks ORDER BY resource`)
	require.NoError(t, err)
	var got []string
	for rows.Next() {
		var r string
		require.NoError(t, rows.Scan(&r))
		got = append(got, r)
	}
	require.NoError(t, rows.Err())
	assert.ElementsMatch(t, valid, got, "each injection string is stored verbatim, once")
	check()
}
