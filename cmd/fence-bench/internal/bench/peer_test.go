package bench

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fencetest"
)

func TestParsePeerReply(t *testing.T) {
	n, d, err := ParsePeerReply("ok 1234 500000000")
	require.NoError(t, err)
	assert.Equal(t, 1234, n)
	assert.Equal(t, 500*time.Millisecond, d)
	_, _, err = ParsePeerReply("err pq: relation does not exist")
	require.ErrorContains(t, err, "relation does not exist")
	for _, bad := range []string{"", "ok", "ok 1", "ok x 5", "ok 1 0", "ok -1 5", "done 1 2", "ok 1 2 3"} {
		_, _, err := ParsePeerReply(bad)
		require.Error(t, err, "%q", bad)
	}
}

// TestPeer builds the pglock peer module and runs two rounds of real
// pglock cycles through it in a private schema.
func TestPeer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the peer module")
	}
	schema := fencetest.Schema(t)
	ctx := context.Background()
	p, err := StartPeer(ctx, "pglockpeer", fencetest.DatabaseURL(), pgx.Identifier{schema}.Sanitize()+".pglock_locks", 2)
	require.NoError(t, err)
	for range 2 {
		n, el, err := p.Run(100 * time.Millisecond)
		require.NoError(t, err)
		assert.Positive(t, n)
		assert.GreaterOrEqual(t, el, 100*time.Millisecond)
	}
	require.NoError(t, p.Close())
	var rows int
	require.NoError(t, fencetest.Pool(t).QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, "pglock_locks"}.Sanitize()).Scan(&rows))
	assert.Zero(t, rows, "every lock released (pglock deletes on release)")
}
