package chaos

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/integration/history"
	"github.com/fencekit/fencekit/sql/migrations"
)

// The lost-reply faults must be real: the write commits, the caller gets an
// error. Otherwise "unknown" outcomes would prove nothing.

func droppingPool(t *testing.T) (*pgxpool.Pool, *commitDropper, string) {
	t.Helper()
	schema := fencetest.Schema(t, migrations.Guard)
	d := &commitDropper{}
	pool := fencetest.PoolWith(t, fencetest.DatabaseURL(), func(c *pgxpool.Config) { c.ConnConfig.DialFunc = d.dial })
	require.NoError(t, CreateDataTable(context.Background(), pool, schema))
	return pool, d, schema
}

func TestCommitDropperLosesReplyAfterCommit(t *testing.T) {
	pool, d, schema := droppingPool(t)
	pg, err := newPGTarget(pool, schema)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	d.armed.Store(true)
	o, err := pg.write(ctx, "r", 5, "committed-in-the-dark")
	require.Error(t, err)
	assert.Equal(t, history.Unknown, o, "%v", err)
	assert.False(t, d.armed.Load(), "the drop fired once")

	v, tok, found, err := pg.read(ctx, "r")
	require.NoError(t, err)
	require.True(t, found, "the COMMIT whose reply was lost did not commit")
	assert.Equal(t, "committed-in-the-dark", v)
	assert.EqualValues(t, 5, tok)

	// Unarmed, the same pool works normally afterwards.
	o, err = pg.write(ctx, "r", 6, "next")
	require.NoError(t, err)
	assert.Equal(t, history.Accepted, o)
}

func TestCommitDropperHoldStallsWrites(t *testing.T) {
	pool, d, _ := droppingPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d.hold()
	qctx, qcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err := pool.QueryRow(qctx, "SELECT 1").Scan(new(int))
	qcancel()
	assert.Error(t, err, "a query went out while the pool was held")
	d.resume()
	require.NoError(t, pool.QueryRow(ctx, "SELECT 1").Scan(new(int)))
}

func TestDropTransportLosesReplyAfterServerHandled(t *testing.T) {
	handled := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handled <- struct{}{}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: dropTransport{base: tr}}
	ctx, armed := withDroppedReply(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL, nil)
	require.NoError(t, err)
	resp, err := client.Do(req)
	if resp != nil {
		resp.Body.Close()
	}
	require.ErrorIs(t, err, errReplyLost)
	select {
	case <-handled:
	default:
		t.Fatal("the server never saw the request whose reply was dropped")
	}
	assert.False(t, armed.Load())
	// The same context no longer drops.
	req, err = http.NewRequestWithContext(ctx, http.MethodPut, srv.URL, nil)
	require.NoError(t, err)
	resp, err = client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)
	<-handled
}
