package leaseops_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/leaseops"
)

func serveHealth(t *testing.T, m *lease.Manager, method string) (int, leaseops.HealthReport) {
	t.Helper()
	rec := httptest.NewRecorder()
	leaseops.HealthHandler(m, time.Second).ServeHTTP(rec, httptest.NewRequest(method, "/ready", nil))
	var rep leaseops.HealthReport
	if method == http.MethodGet && rec.Code != http.StatusMethodNotAllowed {
		require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
		require.NoError(t, json.NewDecoder(rec.Body).Decode(&rep))
	}
	return rec.Code, rep
}

// TestHealthHandler: 200 and ready for a working Manager; 503 naming the
// problem when the node is unchecked (grants refused after a failover), and
// 200 again once it is checked; HEAD answers without a body; other methods
// get 405.
func TestHealthHandler(t *testing.T) {
	e := newEnv(t)
	m := e.manager(lease.Config{})
	_, err := m.Acquire(bg(), lease.Key{AccountID: "a", SessionID: "health"})
	require.NoError(t, err)
	code, rep := serveHealth(t, m, http.MethodGet)
	require.Equal(t, http.StatusOK, code)
	require.True(t, rep.Ready)
	require.True(t, rep.SchemaMigrated)
	require.Equal(t, 1, rep.Leases)
	require.Empty(t, rep.Problems)

	var node string
	require.NoError(t, e.raw.QueryRow(bg(), `SELECT checked_node FROM "`+e.schema+`".fencekit_token_floor WHERE id`).Scan(&node))
	e.exec(`UPDATE %q.fencekit_token_floor SET checked_node = 'elsewhere' WHERE id`)
	code, rep = serveHealth(t, m, http.MethodGet)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.False(t, rep.Ready)
	require.True(t, rep.NodeUnchecked)
	require.Len(t, rep.Problems, 1)
	require.Contains(t, rep.Problems[0], "token floor not checked")
	code, _ = serveHealth(t, m, http.MethodHead)
	require.Equal(t, http.StatusServiceUnavailable, code)

	e.exec(`UPDATE %q.fencekit_token_floor SET checked_node = $1 WHERE id`, node)
	code, rep = serveHealth(t, m, http.MethodGet)
	require.Equal(t, http.StatusOK, code)
	require.False(t, rep.NodeUnchecked)

	code, _ = serveHealth(t, m, http.MethodPost)
	require.Equal(t, http.StatusMethodNotAllowed, code)
}
