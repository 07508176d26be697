package bench

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/sql/migrations"
)

// TestCycleStatements checks that the three floors the lease cycle is
// compared with behave as leases: a held key is refused to another run, a
// release by another run changes nothing, the owner's release frees the
// key, and (keep-row, raw) the row survives release.
func TestCycleStatements(t *testing.T) {
	schema := fencetest.Schema(t, migrations.Lease)
	pool := fencetest.Pool(t)
	ctx := context.Background()
	q := pgx.Identifier{schema}.Sanitize()
	_, err := pool.Exec(ctx, seedDDL(q))
	require.NoError(t, err)
	for name, c := range map[string]struct {
		st    cycleSQL
		table string
		ttl   bool // acquire takes the TTL as $4
		kept  bool // the row survives release
	}{
		"seed":     {seedSQL(q), "demo_session_lease", true, false},
		"keep_row": {keepRowSQL(q), "demo_session_lease_kept", true, true},
		"raw":      {rawSQL(q), "fencekit_leases", false, true},
	} {
		t.Run(name, func(t *testing.T) {
			try := func(sql string, args ...any) bool {
				err := returnsRow(ctx, pool, sql, args...)
				if errors.Is(err, errNotGranted) {
					return false
				}
				require.NoError(t, err)
				return true
			}
			acq := func(run uuid.UUID) bool {
				if c.ttl {
					return try(c.st.acquire, "a", "k", run, 15.0)
				}
				return try(c.st.acquire, "a", "k", run)
			}
			rows := func() int {
				var n int
				require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+q+`.`+c.table+` WHERE account_id = 'a' AND session_id = 'k'`).Scan(&n))
				return n
			}
			one, two := uuid.New(), uuid.New()
			require.True(t, acq(one), "free key granted")
			assert.False(t, acq(two), "held key refused")
			assert.False(t, try(c.st.release, "a", "k", two), "release by another run")
			assert.True(t, try(c.st.release, "a", "k", one), "owner's release")
			assert.False(t, try(c.st.release, "a", "k", one), "second release changes nothing")
			if c.kept {
				assert.Equal(t, 1, rows(), "row kept")
			} else {
				assert.Zero(t, rows(), "row deleted")
			}
			assert.True(t, acq(two), "released key granted again")
		})
	}
}
