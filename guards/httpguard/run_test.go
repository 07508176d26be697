package httpguard_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardtest"
	"github.com/fencekit/fencekit/guards/httpguard"
	"github.com/fencekit/fencekit/guards/memguard"
	"github.com/fencekit/fencekit/internal/obs/obstest"
)

func claimed(tok fence.Token, run, r string) context.Context {
	return httpguard.WithResource(fence.WithClaim(bg(), fence.Claim{Token: tok, Run: run}), r)
}

// A request presenting the mark's token with another run's identity is
// refused with 409 token-reused (its own problem type, neither stale nor
// busy), logged at Error, counted, and nothing is written; the client
// decodes it back to the *fence.ReusedError.
func TestTokenReusedIs409Problem(t *testing.T) {
	mt := obstest.NewMeter(t)
	g, err := memguard.New(memguard.Config{MeterProvider: mt.Provider})
	require.NoError(t, err)
	store := guardtest.NewMapStore()
	logs, logger := obstest.NewLogs()
	srv, client := server(t, mustMiddleware(t, g, httpguard.Config{Logger: logger, MeterProvider: mt.Provider})(storeHandler(store)))

	resp := get(t, client, srv.URL, claimed(8, "run-a", "reports/q3"), nil)
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	resp = get(t, client, srv.URL, claimed(8, "run-b", "reports/q3"), nil)
	assert.Equal(t, http.StatusConflict, resp.StatusCode)
	body, _ := io.ReadAll(resp.Body)
	assert.JSONEq(t, `{"type":"`+httpguard.TypeTokenReused+`","title":"Fencing token reused","status":409,
		"detail":"token 8 was accepted for this resource from another run: the token was issued twice",
		"resource":"reports/q3","presented_token":"8","run":"run-b","mark_run":"run-a"}`, string(body))
	resp.Body = io.NopCloser(strings.NewReader(string(body)))
	err = httpguard.ErrorFromResponse(resp)
	re, ok := fence.IsReused(err)
	require.True(t, ok, "%v", err)
	assert.Equal(t, fence.ReusedError{Resource: "reports/q3", Token: 8, Run: "run-b", MarkRun: "run-a"}, *re)
	assert.NotErrorIs(t, err, fence.ErrStale)
	assert.NotErrorIs(t, err, fence.ErrBusy)

	v, tok, _, _ := store.Get(bg(), "reports/q3")
	assert.Equal(t, "body", v)
	assert.Equal(t, fence.Token(8), tok)

	errs := logs.AtLeast(slog.LevelError)
	require.Len(t, errs, 1)
	assert.Equal(t, "run-b", errs[0].Attrs["run"])
	assert.Equal(t, "run-a", errs[0].Attrs["mark_run"])
	pts := mt.Collect()
	assert.EqualValues(t, 1, obstest.Value(pts, "fencekit.guard.reused", map[string]string{"guard": "http"}))
	assert.EqualValues(t, 1, obstest.Value(pts, "fencekit.guard.reused", map[string]string{"guard": "memory"}))
	assert.EqualValues(t, 0, obstest.Value(pts, "fencekit.guard.stale", nil))

	// The same token from the same run, or with no run, is admitted.
	resp = get(t, client, srv.URL, claimed(8, "run-a", "reports/q3"), nil)
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
	resp = get(t, client, srv.URL, fenced(8, "reports/q3"), nil)
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
}

// The handler's request context carries the full claim: token and run.
func TestHandlerSeesTheClaim(t *testing.T) {
	got := make(chan fence.Claim, 2)
	h := mustMiddleware(t, newMem(t), httpguard.Config{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := fence.ClaimFromContext(r.Context())
		assert.NoError(t, err)
		got <- c
	}))
	for _, want := range []fence.Claim{{Token: 4, Run: "0b9c6f9e-1f6c-4b52-9c33-3c1c2d3e4f50"}, {Token: 5}} {
		req := httptest.NewRequest(http.MethodPost, "/", nil)
		req.Header.Set("Fencing-Token", want.Token.String())
		if want.Run != "" {
			req.Header.Set("Fencing-Run", want.Run)
		}
		req.Header.Set("Fencing-Resource", "r")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, http.StatusOK, rec.Code)
		assert.Equal(t, want, <-got)
	}
}

func TestTransportClaim(t *testing.T) {
	rt := &recordingRT{}
	tr := &httpguard.Transport{Base: rt}

	// Token and run from the claim; a stale run header on the request is
	// replaced, or removed when the claim has none.
	req, _ := http.NewRequestWithContext(claimed(42, "run-a", "r"), http.MethodPut, "http://x/", nil)
	req.Header.Set("Fencing-Run", "forged")
	_, err := tr.RoundTrip(req)
	require.NoError(t, err)
	assert.Equal(t, "42", rt.got.Header.Get("Fencing-Token"))
	assert.Equal(t, "run-a", rt.got.Header.Get("Fencing-Run"))
	assert.Equal(t, "forged", req.Header.Get("Fencing-Run"), "the caller's request is not modified")
	req, _ = http.NewRequestWithContext(fenced(42, "r"), http.MethodPut, "http://x/", nil)
	req.Header.Set("Fencing-Run", "forged")
	_, err = tr.RoundTrip(req)
	require.NoError(t, err)
	assert.Empty(t, rt.got.Header.Values("Fencing-Run"))

	// Custom run header name.
	tr2 := &httpguard.Transport{Base: rt, RunHeader: "X-Run"}
	req, _ = http.NewRequestWithContext(claimed(3, "run-b", "r"), http.MethodPut, "http://x/", nil)
	_, err = tr2.RoundTrip(req)
	require.NoError(t, err)
	assert.Equal(t, "run-b", rt.got.Header.Get("X-Run"))

	// A fenced request (resource in ctx) without a valid claim, or any
	// request with a malformed run, fails before anything is sent.
	for name, tc := range map[string]struct {
		ctx  context.Context
		want error
	}{
		"no claim":       {httpguard.WithResource(bg(), "r"), fence.ErrNoToken},
		"token 0":        {claimed(0, "", "r"), fence.ErrInvalidToken},
		"bad run":        {claimed(4, "bad run", "r"), fence.ErrInvalidRun},
		"bad run, no rs": {fence.WithClaim(bg(), fence.Claim{Token: 4, Run: "x\r\ny"}), fence.ErrInvalidRun},
	} {
		t.Run(name, func(t *testing.T) {
			rt.got = nil
			body := &closeTracker{Reader: strings.NewReader("x")}
			req, _ := http.NewRequestWithContext(tc.ctx, http.MethodPost, "http://x/", body)
			resp, err := tr.RoundTrip(req)
			assert.Nil(t, resp)
			assert.ErrorIs(t, err, tc.want)
			assert.True(t, body.closed)
			assert.Nil(t, rt.got, "nothing sent")
		})
	}
}

// errRT fails every request with its error after the context ended.
type errRT struct {
	cancel context.CancelCauseFunc
	cause  error
}

func (e *errRT) RoundTrip(*http.Request) (*http.Response, error) {
	e.cancel(e.cause)
	return nil, errors.New("connection reset")
}

// Once the request's context has ended (a lost lease), Transport reports
// the context's error and cause, never busy: before sending, and when the
// base transport fails after the context ended.
func TestTransportEndedContext(t *testing.T) {
	lost := errors.New("lease lost: trust expired")
	rt := &recordingRT{}
	tr := &httpguard.Transport{Base: rt}
	ctx, cancel := context.WithCancelCause(claimed(7, "run-a", "r"))
	cancel(lost)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://x/", nil)
	_, err := tr.RoundTrip(req)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, err, lost)
	assert.Nil(t, rt.got, "nothing sent")

	ctx, cancel = context.WithCancelCause(claimed(7, "run-a", "r"))
	defer cancel(nil)
	req, _ = http.NewRequestWithContext(ctx, http.MethodPost, "http://x/", nil)
	_, err = (&httpguard.Transport{Base: &errRT{cancel: cancel, cause: lost}}).RoundTrip(req)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, err, lost)
	assert.NotErrorIs(t, err, fence.ErrBusy)
}
