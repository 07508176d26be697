package lease_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// TestMigration9UpAndDown: a schema at version 8 with leases held by the
// previous release's statements (per-lease rows) migrates to version 9
// with every grant intact and still renewable by those statements; Managers
// of both renewal modes then work beside them. Going down to 8 converts the
// heartbeat rows to per-lease rows with their heartbeat's expiry (held as
// long, by the same run, with the same token), after which the previous
// release's statements work again; a second round trip is clean.
func TestMigration9UpAndDown(t *testing.T) {
	e := newEnv(t)
	opts := migrations.Options{Schema: e.schema}
	down, err := migrations.Down(bg(), e.raw, opts, migrations.Lease, 8)
	require.NoError(t, err)
	require.Equal(t, leaseVersionsAbove(t, 8, true), down)

	old := newOldManager(t, e.schema, time.Minute)
	held, err := old.grant(bg(), uniqueKey(t), false)
	require.NoError(t, err)
	gone, err := old.grant(bg(), uniqueKey(t), false)
	require.NoError(t, err)
	old.release(gone)

	applied, err := migrations.Migrate(bg(), e.raw, opts, migrations.Lease)
	require.NoError(t, err)
	require.Equal(t, map[migrations.Set][]int{migrations.Lease: leaseVersionsAbove(t, 8, false)}, applied)

	hb := e.manager(heartbeat(lease.Config{TTL: time.Minute}))
	pl := e.manager(lease.Config{TTL: time.Minute, Renewal: lease.RenewalPerLease})
	st, err := hb.Inspect(bg(), held.key)
	require.NoError(t, err)
	require.Equal(t, lease.StateHeld, st.State)
	require.Equal(t, held.run, st.RunID)
	require.EqualValues(t, held.token, st.Token)
	_, err = hb.Acquire(bg(), held.key)
	_, isH := isHeld(err)
	require.True(t, isH, "the per-lease row written at version 8 is held: %v", err)
	rows, err := old.pool.Query(bg(), old.st["renewBatch"], []string{held.key.AccountID}, []string{held.key.SessionID}, []string{held.run.String()}, time.Minute.Microseconds())
	require.NoError(t, err)
	require.True(t, rows.Next(), "the previous release's renewal still renews its row")
	rows.Close()
	st, err = hb.Inspect(bg(), gone.key)
	require.NoError(t, err)
	require.Equal(t, lease.StateReleased, st.State)

	lh, err := hb.Acquire(bg(), gone.key)
	require.NoError(t, err)
	require.Greater(t, int64(lh.Token()), gone.token)
	lp, err := pl.Acquire(bg(), uniqueKey(t))
	require.NoError(t, err)
	epochExpiry := func() time.Time {
		var exp time.Time
		require.NoError(t, e.raw.QueryRow(bg(), fmt.Sprintf(`SELECT expires_at FROM %q.fencekit_managers WHERE manager_id = $1`, e.schema),
			lease.EpochOf(hb)).Scan(&exp))
		return exp
	}
	before := epochExpiry()

	// Down with a live heartbeat row: converted, not refused.
	down, err = migrations.Down(bg(), e.raw, opts, migrations.Lease, 8)
	require.NoError(t, err)
	require.Equal(t, leaseVersionsAbove(t, 8, true), down)
	var exp time.Time
	var token int64
	var run string
	require.NoError(t, e.raw.QueryRow(bg(), fmt.Sprintf(`SELECT expires_at, fence_token, run_id::text FROM %q.fencekit_leases WHERE account_id=$1 AND session_id=$2`, e.schema),
		lh.Key().AccountID, lh.Key().SessionID).Scan(&exp, &token, &run))
	require.False(t, exp.Before(before), "the converted row keeps its heartbeat's expiry (%s, heartbeat %s)", exp, before)
	require.WithinDuration(t, before, exp, time.Minute)
	require.Equal(t, int64(lh.Token()), token)
	require.Equal(t, lh.RunID().String(), run)
	_, err = old.grant(bg(), lh.Key(), false)
	require.ErrorIs(t, err, errOldHeld, "still held by the same run after the conversion")
	// The heartbeat Manager can no longer renew (no heartbeat table): its
	// leases end by their trust deadline, before the converted expiry.
	_, err = lh.Renew(bg())
	require.Error(t, err)
	require.NoError(t, e.raw.QueryRow(bg(), `SELECT count(*) FROM information_schema.columns WHERE table_schema = $1 AND column_name IN ('manager_id', 'displaced_manager_id', 'cause')`,
		e.schema).Scan(&token))
	require.Zero(t, token, "version 9's columns are gone")

	// And up again, and down once more with no heartbeat row: clean.
	_, err = migrations.Migrate(bg(), e.raw, opts, migrations.Lease)
	require.NoError(t, err)
	_, err = pl.Renew(bg(), lp.Key(), lp.RunID())
	require.NoError(t, err, "per-lease rows survive both directions")
	require.NoError(t, migrations.Validate(bg(), e.raw, opts, migrations.Lease))
	down, err = migrations.Down(bg(), e.raw, opts, migrations.Lease, 8)
	require.NoError(t, err)
	require.Equal(t, leaseVersionsAbove(t, 8, true), down)
	_, err = migrations.Migrate(bg(), e.raw, opts, migrations.Lease)
	require.NoError(t, err)
}

// leaseVersionsAbove is the lease set's versions above v that this build
// embeds, newest first when down (the order Down reverts them in), oldest
// first otherwise (the order Migrate applies them in).
func leaseVersionsAbove(t *testing.T, v int, down bool) []int {
	t.Helper()
	ms, err := migrations.Migrations(migrations.Lease)
	require.NoError(t, err)
	var out []int
	for _, m := range ms {
		if m.Version > v {
			out = append(out, m.Version)
		}
	}
	if down {
		slices.Reverse(out)
	}
	return out
}
