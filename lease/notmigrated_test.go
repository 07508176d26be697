package lease_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// TestUnmigratedSchemaIsTyped: a Manager on a schema that was never
// migrated gets an error matching migrations.ErrNotMigrated that names the
// remedy, from every statement, instead of a bare SQLSTATE 42P01.
func TestUnmigratedSchemaIsTyped(t *testing.T) {
	pool := fencetest.Pool(t)
	ctx := context.Background()
	schema := "fk_unmigrated_" + strings.ReplaceAll(t.Name(), "/", "_")[len("Test"):]
	quoted, err := migrations.QuoteIdentifier(strings.ToLower(schema))
	require.NoError(t, err)
	schema = strings.ToLower(schema)
	_, err = pool.Exec(ctx, "CREATE SCHEMA "+quoted)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := pool.Exec(context.Background(), "DROP SCHEMA "+quoted+" CASCADE")
		require.NoError(t, err)
	})

	m, err := lease.New(lease.Config{Pool: pool, Schema: schema})
	require.NoError(t, err)
	defer m.Close()
	key := lease.Key{AccountID: "acme", SessionID: "conv-1"}

	_, err = m.Acquire(ctx, key)
	requireNotMigrated(t, err)
	_, err = m.Takeover(ctx, key)
	requireNotMigrated(t, err)
	_, err = m.Inspect(ctx, key)
	requireNotMigrated(t, err)
}

func requireNotMigrated(t *testing.T, err error) {
	t.Helper()
	require.ErrorIs(t, err, migrations.ErrNotMigrated)
	var nm *migrations.NotMigratedError
	require.True(t, errors.As(err, &nm))
	require.Contains(t, err.Error(), "migrations.Migrate")
	require.NotErrorIs(t, err, lease.ErrBusy)
}
