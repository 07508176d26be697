package hostile

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/sql/migrations"
)

// leastPrivilege creates a schema migrated by the admin, an application
// table app_data, and a role holding only Grants; it returns the schema, the
// role and an independent pool logged in as the role.
func leastPrivilege(t *testing.T) (schema, role string, app *pgxpool.Pool) {
	t.Helper()
	ctx := testCtx(t)
	schema = fencetest.Schema(t, migrations.Lease, migrations.Guard)
	admin := fencetest.Pool(t)
	_, err := admin.Exec(ctx, `CREATE TABLE "`+schema+`".app_data (id text PRIMARY KEY, v text NOT NULL)`)
	require.NoError(t, err)
	role = fencetest.RandomName("fk_role_")
	require.NoError(t, CreateRole(ctx, admin, schema, role, "app_data"))
	t.Cleanup(func() {
		// Runs after the role's pools (registered later) are closed.
		if err := DropRole(context.Background(), admin, role); err != nil {
			t.Errorf("drop role: %v", err)
		}
	})
	return schema, role, poolAs(t, role)
}

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// TestLeastPrivilegeRoleRefusesTheRest proves the role is actually limited:
// DDL, DELETE, TRUNCATE and setval are refused with insufficient_privilege.
func TestLeastPrivilegeRoleRefusesTheRest(t *testing.T) {
	schema, _, app := leastPrivilege(t)
	ctx := testCtx(t)
	q := `"` + schema + `".`
	for _, stmt := range []string{
		"CREATE TABLE " + q + "evil (x int)",
		"DROP TABLE " + q + "fencekit_guard_marks",
		"DELETE FROM " + q + "fencekit_leases",
		"DELETE FROM " + q + "fencekit_guard_marks",
		"TRUNCATE " + q + "fencekit_guard_marks",
		"ALTER TABLE " + q + "fencekit_leases ADD COLUMN x int",
		"SELECT setval('" + schema + ".fencekit_token_seq', 1)",
		"ALTER SEQUENCE " + q + "fencekit_token_seq RESTART",
		"CREATE SCHEMA fk_evil_schema",
	} {
		_, err := app.Exec(ctx, stmt)
		require.Error(t, err, stmt)
		assert.Contains(t, []string{"42501", "42P01"}, pgCode(err), "%s: %v", stmt, err)
		if pgCode(err) == "42P01" {
			t.Errorf("%s: %v (the role should see the table and be refused, not miss it)", stmt, err)
		}
	}
}

// TestLeastPrivilegePGGuard runs the PostgreSQL guard's operations as the
// least-privilege role: FenceTx inside the application's own transaction,
// Fence, Mark, and a stale refusal.
func TestLeastPrivilegePGGuard(t *testing.T) {
	schema, _, pool := leastPrivilege(t)
	ctx := testCtx(t)

	g, err := pgguard.New(pgguard.Config{DB: pool, Schema: schema})
	require.NoError(t, err)
	upsert := `INSERT INTO "` + schema + `".app_data (id, v) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v`

	// FenceTx in the caller's transaction.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, g.FenceTx(fence.WithClaim(ctx, fence.Claim{Token: 7}), tx, "doc/1"))
	_, err = tx.Exec(ctx, upsert, "doc/1", "seven")
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	// Fence, higher token.
	require.NoError(t, g.Fence(ctx, "doc/1", 8, func(ctx context.Context) error {
		tx, _ := pgguard.TxFromContext(ctx)
		_, err := tx.Exec(ctx, upsert, "doc/1", "eight")
		return err
	}))
	// Stale refusal.
	err = g.Fence(ctx, "doc/1", 7, func(context.Context) error {
		t.Error("stale write ran")
		return nil
	})
	se, ok := fence.IsStale(err)
	require.True(t, ok, "%v", err)
	assert.Equal(t, fence.Token(8), se.Highest)
	mark, err := g.Mark(ctx, "doc/1")
	require.NoError(t, err)
	assert.Equal(t, fence.Token(8), mark.Token)
	var v string
	require.NoError(t, pool.QueryRow(ctx, `SELECT v FROM "`+schema+`".app_data WHERE id = 'doc/1'`).Scan(&v))
	assert.Equal(t, "eight", v)
}

func TestGrantsValidateNames(t *testing.T) {
	for _, bad := range []struct{ schema, role, table string }{
		{`x"; DROP SCHEMA public CASCADE; --`, "r", ""},
		{"s", `r" SUPERUSER; --`, ""},
		{"s", "r", `t; DELETE FROM x`},
	} {
		var extra []string
		if bad.table != "" {
			extra = append(extra, bad.table)
		}
		_, err := Grants(bad.schema, bad.role, extra...)
		assert.ErrorIs(t, err, migrations.ErrInvalidIdentifier, "%+v", bad)
	}
}
