package httpguard_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/guards/httpguard"
	"github.com/fencekit/fencekit/guards/memguard"
	"github.com/fencekit/fencekit/internal/obs/obstest"
)

// TestMiddlewareMetrics: admitted requests, stale rejections (with the
// token gap) are counted under guard="http" — and the wrapped memguard
// counts its own under guard="memory"; a handler answering 500 under an
// admitted token and a bad request count as neither. No attribute names
// the resource.
func TestMiddlewareMetrics(t *testing.T) {
	mt := obstest.NewMeter(t)
	g, err := memguard.New(memguard.Config{MeterProvider: mt.Provider})
	require.NoError(t, err)
	mw, err := httpguard.Middleware(g, httpguard.Config{MeterProvider: mt.Provider})
	require.NoError(t, err)
	fail := false
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if fail {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	do := func(token, resource string) int {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		if token != "" {
			r.Header.Set(httpguard.DefaultTokenHeader, token)
		}
		r.Header.Set(httpguard.DefaultResourceHeader, resource)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	const res = "doc/secret-name"
	require.Equal(t, http.StatusOK, do("10", res))
	require.Equal(t, http.StatusOK, do("10", res))
	require.Equal(t, http.StatusConflict, do("7", res))
	require.Equal(t, http.StatusBadRequest, do("", res))
	fail = true
	require.Equal(t, http.StatusInternalServerError, do("11", res))

	pts := mt.Collect()
	http_ := map[string]string{"guard": "http"}
	mem := map[string]string{"guard": "memory"}
	require.EqualValues(t, 2, obstest.Value(pts, "fencekit.guard.accepted", http_))
	require.EqualValues(t, 1, obstest.Value(pts, "fencekit.guard.stale", http_))
	require.EqualValues(t, 1, obstest.Value(pts, "fencekit.guard.stale", mem))
	gap := obstest.Find(pts, "fencekit.guard.token_gap", http_)
	require.Len(t, gap, 1)
	require.EqualValues(t, 3, gap[0].Max, "10 − 7")
	for _, p := range pts {
		for _, v := range p.Attrs {
			require.NotEqual(t, res, v, "%s carries the resource", p.Name)
		}
	}
}
