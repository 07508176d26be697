package httpguard_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardtest"
	"github.com/fencekit/fencekit/guards/httpguard"
	"github.com/fencekit/fencekit/guards/memguard"
)

// The client decides "may have been sent" with net/http's client trace:
// a connection that could not be opened sent nothing (the context's or the
// dial's error, no unknown outcome); a connection that the service closed
// after reading the request leaves the outcome unknown, with the context
// live; a Base that is not an *http.Transport is assumed to have sent.
func TestTransportOutcome(t *testing.T) {
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	client := &http.Client{Transport: &httpguard.Transport{Base: base}}

	t.Run("not sent", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close()) // nothing listens: connection refused
		err = post(fenced(3, "doc"), client, "http://"+addr+"/", "v", false)
		require.Error(t, err)
		assert.NotErrorIs(t, err, fence.ErrOutcomeUnknown)
	})

	t.Run("connection closed after the request", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		t.Cleanup(func() { _ = ln.Close() })
		got := make(chan string, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			req, err := http.ReadRequest(bufioReader(c))
			if err == nil {
				b, _ := io.ReadAll(req.Body)
				got <- string(b)
			}
			_ = c.Close() // no reply: as if the service crashed after applying it
		}()
		err = post(fenced(3, "doc"), client, "http://"+ln.Addr().String()+"/", "applied?", false)
		require.ErrorIs(t, err, fence.ErrOutcomeUnknown)
		assert.NotErrorIs(t, err, context.Canceled)
		oe, ok := fence.IsOutcomeUnknown(err)
		require.True(t, ok)
		assert.Equal(t, "doc", oe.Resource)
		assert.Equal(t, "httpguard: POST", oe.Op)
		assert.Equal(t, "applied?", <-got, "the service received the request")
	})

	t.Run("other Base", func(t *testing.T) {
		tr := &httpguard.Transport{Base: roundTripFunc(func(*http.Request) (*http.Response, error) {
			return nil, errors.New("connection reset")
		})}
		req, _ := http.NewRequestWithContext(fenced(3, "doc"), http.MethodPost, "http://x/", strings.NewReader("v"))
		_, err := tr.RoundTrip(req)
		assert.ErrorIs(t, err, fence.ErrOutcomeUnknown)
		// A request without token or resource is not fenced: passed through.
		req, _ = http.NewRequestWithContext(bg(), http.MethodPost, "http://x/", nil)
		_, err = tr.RoundTrip(req)
		assert.NotErrorIs(t, err, fence.ErrOutcomeUnknown)
	})
}

func bufioReader(c net.Conn) *bufio.Reader { return bufio.NewReader(c) }

func newStrictMem() (*memguard.Guard, error) { return memguard.New(memguard.Config{Strict: true}) }

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// outcomeGuard reports an unknown outcome after running write.
type outcomeGuard struct{}

func (outcomeGuard) Fence(ctx context.Context, r string, _ fence.Token, write func(context.Context) error) error {
	if err := write(ctx); err != nil {
		return err
	}
	return fence.OutcomeUnknown(ctx, "test: commit", r, errors.New("connection reset"))
}

// A guard's unknown outcome is answered 500 outcome-unknown (never 503
// "nothing was written"), and the client decodes it to an error matching
// fence.ErrOutcomeUnknown.
func TestOutcomeUnknownIs500Problem(t *testing.T) {
	var logged error
	srv, client := server(t, mustMiddleware(t, outcomeGuard{}, httpguard.Config{
		ErrorLog: func(_ *http.Request, err error) { logged = err },
	})(storeHandler(guardtest.NewMapStore())))
	resp := get(t, client, srv.URL, fenced(4, "doc"), nil)
	assert.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	err := httpguard.ErrorFromResponse(resp)
	require.ErrorIs(t, err, fence.ErrOutcomeUnknown)
	assert.NotErrorIs(t, err, fence.ErrBusy)
	var pe *httpguard.ProblemError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, httpguard.TypeOutcomeUnknown, pe.Problem.Type)
	assert.Equal(t, "doc", pe.Problem.Resource)
	assert.ErrorIs(t, logged, fence.ErrOutcomeUnknown)
}

// The client sends the claim's scope; a strict middleware refuses a
// resource outside it, or a claim without one, with 403 out-of-scope
// before the guard is called, and the client decodes the *fence.ScopeError;
// a malformed scope header is 400 invalid-scope. Without Strict the scope
// reaches the guard in the claim (here a strict memguard, refused the same
// way).
func TestScope(t *testing.T) {
	mem := newMem(t)
	cg := &countingGuard{Guard: mem}
	store := guardtest.NewMapStore()
	srv, client := server(t, mustMiddleware(t, cg, httpguard.Config{Strict: true})(storeHandler(store)))
	scopeA := fence.JoinResource("acme", "conv-1")
	resA := fence.JoinResource("acme", "conv-1", "notes")
	scoped := func(tok fence.Token, scope, r string) context.Context {
		return httpguard.WithResource(fence.WithClaim(bg(), fence.Claim{Token: tok, Scope: scope}), r)
	}

	resp := get(t, client, srv.URL, scoped(5, scopeA, resA), nil)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.Equal(t, int64(1), cg.calls.Load())

	for name, ctx := range map[string]context.Context{
		"another key": scoped(9, fence.JoinResource("acme", "conv-2"), resA),
		"no scope":    fenced(9, resA),
	} {
		t.Run(name, func(t *testing.T) {
			resp := get(t, client, srv.URL, ctx, nil)
			assert.Equal(t, http.StatusForbidden, resp.StatusCode)
			err := httpguard.ErrorFromResponse(resp)
			require.ErrorIs(t, err, fence.ErrOutOfScope)
			se, ok := fence.IsOutOfScope(err)
			require.True(t, ok)
			c, _ := fence.ClaimFromContext(ctx)
			assert.Equal(t, fence.ScopeError{Resource: resA, Scope: c.Scope}, *se)
		})
	}
	assert.Equal(t, int64(1), cg.calls.Load(), "the guard is not called for a refused scope")
	assert.Equal(t, fence.Token(5), markOf(mem, resA))

	// Malformed scope headers, on the wire.
	for name, hdr := range map[string]string{
		"empty":    "Fencing-Scope: \r\n",
		"repeated": "Fencing-Scope: acme/conv-1\r\nFencing-Scope: acme/conv-1\r\n",
		"trailing": "Fencing-Scope: acme/conv-1/\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			raw := "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\nFencing-Token: 9\r\nFencing-Resource: " + resA + "\r\n" + hdr + "\r\n"
			resp := rawRequest(t, srv.Listener.Addr().String(), raw)
			assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
		})
	}

	// Without Strict, the scope travels to the guard's claim.
	strictMem, err := newStrictMem()
	require.NoError(t, err)
	srv2, client2 := server(t, mustMiddleware(t, strictMem, httpguard.Config{})(storeHandler(guardtest.NewMapStore())))
	resp = get(t, client2, srv2.URL, scoped(5, scopeA, resA), nil)
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
	resp = get(t, client2, srv2.URL, scoped(9, fence.JoinResource("acme", "conv-2"), resA), nil)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	assert.ErrorIs(t, httpguard.ErrorFromResponse(resp), fence.ErrOutOfScope)
}
