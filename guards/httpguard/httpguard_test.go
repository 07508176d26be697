package httpguard_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardtest"
	"github.com/fencekit/fencekit/guards/httpguard"
	"github.com/fencekit/fencekit/guards/memguard"
	"github.com/fencekit/fencekit/internal/netproxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func bg() context.Context { return context.Background() }

// countingGuard records whether Fence was called.
type countingGuard struct {
	fence.Guard
	calls atomic.Int64
}

func (c *countingGuard) Fence(ctx context.Context, r string, tok fence.Token, w func(context.Context) error) error {
	c.calls.Add(1)
	return c.Guard.Fence(ctx, r, tok, w)
}

// errGuard answers every Fence with err, without calling write.
type errGuard struct{ err error }

func (g errGuard) Fence(context.Context, string, fence.Token, func(context.Context) error) error {
	return g.err
}

func mustMiddleware(t testing.TB, g fence.Guard, cfg httpguard.Config) func(http.Handler) http.Handler {
	t.Helper()
	mw, err := httpguard.Middleware(g, cfg)
	require.NoError(t, err)
	return mw
}

func newMem(t testing.TB) *memguard.Guard {
	g, err := memguard.New(memguard.Config{})
	require.NoError(t, err)
	return g
}

// storeHandler writes the request body to store under the fenced resource
// and token from the request context. "X-Fail: <status>" makes it answer
// that status without writing.
func storeHandler(store guardtest.Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if st := r.Header.Get("X-Fail"); st != "" {
			var code int
			_, _ = fmt.Sscan(st, &code)
			w.Header().Set("X-Handler", "failed")
			w.WriteHeader(code)
			_, _ = io.WriteString(w, "handler refused")
			return
		}
		tok, ok := fence.FromContext(r.Context())
		res, ok2 := httpguard.ResourceFromContext(r.Context())
		if !ok || !ok2 {
			http.Error(w, "no token/resource in context", http.StatusInternalServerError)
			return
		}
		body, _ := io.ReadAll(r.Body)
		if err := store.Put(r.Context(), res, tok, string(body)); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("X-Written", res)
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "stored "+tok.String())
	})
}

// server starts an httptest server and a client that uses Transport.
func server(t testing.TB, h http.Handler) (*httptest.Server, *http.Client) {
	t.Helper()
	srv := httptest.NewServer(h)
	base := &http.Transport{}
	t.Cleanup(func() {
		base.CloseIdleConnections()
		srv.Close()
	})
	return srv, &http.Client{Transport: &httpguard.Transport{Base: base}}
}

// httpSubject is a guardtest.Subject whose writes go through HTTP.
type httpSubject struct {
	url    string
	client *http.Client
	read   func(ctx context.Context, r string) (string, fence.Token, bool, error)
}

func (s *httpSubject) do(ctx context.Context, r string, tok fence.Token, v string, fail bool) error {
	return s.send(httpguard.WithResource(fence.WithToken(ctx, tok), r), v, fail)
}

// send posts v under the claim and resource that ctx carries (Transport
// sets the headers).
func (s *httpSubject) send(ctx context.Context, v string, fail bool) error {
	return post(ctx, s.client, s.url, v, fail)
}

// post posts v to url with client; "X-Fail: 500" when fail.
func post(ctx context.Context, client *http.Client, url, v string, fail bool) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(v))
	if err != nil {
		return err
	}
	if fail {
		req.Header.Set("X-Fail", "500")
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := httpguard.ErrorFromResponse(resp); err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

func (s *httpSubject) Write(ctx context.Context, r string, tok fence.Token, v string) error {
	return s.do(ctx, r, tok, v, false)
}

// WriteClaim implements guardtest.ClaimWriter: the Transport sends the
// claim's token and run.
func (s *httpSubject) WriteClaim(ctx context.Context, r string, c fence.Claim, v string) error {
	return s.send(httpguard.WithResource(fence.WithClaim(ctx, c), r), v, false)
}

// WriteContext implements guardtest.ContextWriter: the claim is whatever
// ctx carries.
func (s *httpSubject) WriteContext(ctx context.Context, r string, v string) error {
	return s.send(httpguard.WithResource(ctx, r), v, false)
}

func (s *httpSubject) WriteFailing(ctx context.Context, r string, tok fence.Token) error {
	return s.do(ctx, r, tok, "failing", true)
}

func (s *httpSubject) Read(ctx context.Context, r string) (string, fence.Token, bool, error) {
	return s.read(ctx, r)
}

func TestConformanceMemguard(t *testing.T) {
	store := guardtest.NewMapStore()
	s := newKitSubject(t, newMem(t), storeHandler(store), store.Get)
	guardtest.Run(t, guardtest.Config{New: func(*testing.T) guardtest.Subject { return s }})
}

// kitSubject is an httpSubject with every interface of the conformance
// kit: WriteStrict posts to the same handler and guard behind a strict
// middleware (Config.Strict); WriteHeld posts through a TCP proxy that
// holds the service's reply until the request's context ends, with a
// client whose Base is an *http.Transport.
type kitSubject struct {
	*httpSubject
	strictURL string
	srvAddr   string // the service, behind a proxy of each WriteHeld's own
	guard     fence.Guard
}

var (
	_ guardtest.StrictWriter  = (*kitSubject)(nil)
	_ guardtest.OutcomeWriter = (*kitSubject)(nil)
	_ guardtest.ClaimWriter   = (*kitSubject)(nil)
	_ guardtest.ContextWriter = (*kitSubject)(nil)
)

func newKitSubject(t *testing.T, g fence.Guard, h http.Handler, read func(ctx context.Context, r string) (string, fence.Token, bool, error)) *kitSubject {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/", mustMiddleware(t, g, httpguard.Config{})(h))
	mux.Handle("/strict", mustMiddleware(t, g, httpguard.Config{Strict: true})(h))
	srv, client := server(t, mux)
	return &kitSubject{
		httpSubject: &httpSubject{url: srv.URL, client: client, read: read},
		strictURL:   srv.URL + "/strict",
		srvAddr:     srv.Listener.Addr().String(),
		guard:       g,
	}
}

// Guard is the service's guard (guardtest.Fencer).
func (s *kitSubject) Guard() fence.Guard { return s.guard }

func (s *kitSubject) WriteStrict(ctx context.Context, r string, c fence.Claim, v string) error {
	return post(httpguard.WithResource(fence.WithClaim(ctx, c), r), s.client, s.strictURL, v, false)
}

// WriteHeld: the service's reply is held by a proxy of this call's own
// (so that calls on different resources can run at once); the first reply
// bytes reaching it mean the handler ran and the guard committed.
func (s *kitSubject) WriteHeld(ctx context.Context, r string, tok fence.Token, v string, applied func()) error {
	p, err := netproxy.New(s.srvAddr)
	if err != nil {
		return err
	}
	base := &http.Transport{}
	defer func() {
		p.Restore()
		base.CloseIdleConnections()
		_ = p.Close()
	}()
	var once sync.Once
	p.OnHold(func(netproxy.Direction) { once.Do(applied) })
	p.Pause(netproxy.Downstream)
	held := &http.Client{Transport: &httpguard.Transport{Base: base}}
	return post(httpguard.WithResource(fence.WithToken(ctx, tok), r), held, "http://"+p.Addr()+"/", v, false)
}

func get(t *testing.T, client *http.Client, url string, ctx context.Context, hdr map[string][]string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader("body"))
	require.NoError(t, err)
	for k, vs := range hdr {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := client.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func fenced(tok fence.Token, r string) context.Context {
	return httpguard.WithResource(fence.WithToken(bg(), tok), r)
}

func TestStaleIs409Problem(t *testing.T) {
	g := newMem(t)
	store := guardtest.NewMapStore()
	srv, client := server(t, mustMiddleware(t, g, httpguard.Config{})(storeHandler(store)))

	resp := get(t, client, srv.URL, fenced(8, "reports/q3"), nil)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	assert.Equal(t, "reports/q3", resp.Header.Get("X-Written"))
	body, _ := io.ReadAll(resp.Body)
	assert.Equal(t, "stored 8", string(body))

	resp = get(t, client, srv.URL, fenced(7, "reports/q3"), nil)
	assert.Equal(t, http.StatusConflict, resp.StatusCode)
	assert.Equal(t, httpguard.ProblemContentType, resp.Header.Get("Content-Type"))
	body, _ = io.ReadAll(resp.Body)
	assert.JSONEq(t, `{"type":"`+httpguard.TypeStaleToken+`","title":"Stale fencing token","status":409,
		"detail":"token 7 is below token 8, which this resource has already accepted",
		"resource":"reports/q3","presented_token":"7","highest_token":"8"}`, string(body))
	resp.Body = io.NopCloser(strings.NewReader(string(body)))
	err := httpguard.ErrorFromResponse(resp)
	se, ok := fence.IsStale(err)
	require.True(t, ok, "%v", err)
	assert.Equal(t, fence.StaleError{Resource: "reports/q3", Presented: 7, Highest: 8}, *se)
	v, tok, _, _ := store.Get(bg(), "reports/q3")
	assert.Equal(t, "body", v)
	assert.Equal(t, fence.Token(8), tok)
	assert.Equal(t, fence.Token(8), markOf(g, "reports/q3"))
}

// A handler error (status >= 400) is relayed unchanged and the mark is not
// raised.
func TestHandlerErrorRelayedMarkNotRaised(t *testing.T) {
	g := newMem(t)
	store := guardtest.NewMapStore()
	srv, client := server(t, mustMiddleware(t, g, httpguard.Config{})(storeHandler(store)))
	require.Equal(t, http.StatusCreated, get(t, client, srv.URL, fenced(3, "r"), nil).StatusCode)
	for _, code := range []int{400, 404, 422, 500, 503} {
		resp := get(t, client, srv.URL, fenced(9, "r"), map[string][]string{"X-Fail": {fmt.Sprint(code)}})
		assert.Equal(t, code, resp.StatusCode)
		assert.Equal(t, "failed", resp.Header.Get("X-Handler"))
		body, _ := io.ReadAll(resp.Body)
		assert.Equal(t, "handler refused", string(body))
		assert.Equal(t, fence.Token(3), markOf(g, "r"), "status %d", code)
	}
	// The mark is still 3: token 5 is accepted.
	assert.Equal(t, http.StatusCreated, get(t, client, srv.URL, fenced(5, "r"), nil).StatusCode)
	assert.Equal(t, fence.Token(5), markOf(g, "r"))
}

type garbage struct {
	name string
	hdr  map[string][]string
	typ  string
}

func garbageTable() []garbage {
	tok := func(vs ...string) map[string][]string {
		return map[string][]string{"Fencing-Token": vs, "Fencing-Resource": {"r"}}
	}
	res := func(vs ...string) map[string][]string {
		return map[string][]string{"Fencing-Token": {"9"}, "Fencing-Resource": vs}
	}
	var out []garbage
	for _, v := range []string{"", "-1", "0", "00", "07", "0x1", "+7", " 7", "7 ", "\t7", "1,2", "1 2", "7.0", "1e3",
		"9223372036854775808", "99999999999999999999", "00000000000000000009", "١٢", "１２", "7\x00", "\x00", "seven", "9_000"} {
		out = append(out, garbage{fmt.Sprintf("token %q", v), tok(v), httpguard.TypeInvalidToken})
	}
	out = append(out,
		garbage{"token twice", tok("9", "9"), httpguard.TypeInvalidToken},
		garbage{"token twice different", tok("7", "8"), httpguard.TypeInvalidToken},
		garbage{"token missing", map[string][]string{"Fencing-Resource": {"r"}}, httpguard.TypeInvalidToken},
		garbage{"resource missing", map[string][]string{"Fencing-Token": {"9"}}, httpguard.TypeInvalidResource},
		garbage{"resource twice", res("r", "r"), httpguard.TypeInvalidResource},
		garbage{"resource empty", res(""), httpguard.TypeInvalidResource},
		garbage{"resource NUL", res("a\x00b"), httpguard.TypeInvalidResource},
		garbage{"resource newline", res("a\nb"), httpguard.TypeInvalidResource},
		garbage{"resource not UTF-8", res("\xff\xfe"), httpguard.TypeInvalidResource},
		garbage{"resource too long", res(strings.Repeat("x", fence.MaxResourceLen+1)), httpguard.TypeInvalidResource},
	)
	run := func(vs ...string) map[string][]string {
		return map[string][]string{"Fencing-Token": {"9"}, "Fencing-Resource": {"r"}, "Fencing-Run": vs}
	}
	for _, v := range []string{"", "has space", "semi;colon", "a,b", "ünï", "run\x00", "run\x7f", "a/b", strings.Repeat("r", fence.MaxRunLen+1)} {
		out = append(out, garbage{fmt.Sprintf("run %q", v), run(v), httpguard.TypeInvalidRun})
	}
	out = append(out, garbage{"run twice", run("run-a", "run-a"), httpguard.TypeInvalidRun},
		garbage{"run twice different", run("run-a", "run-b"), httpguard.TypeInvalidRun})
	return out
}

// Malformed, missing or duplicate headers get 400 problem+json and never
// reach the guard; the mark is untouched. Driven through the handler
// directly, so values HTTP framing would alter or refuse reach it verbatim.
func TestGarbageHeadersDirect(t *testing.T) {
	mem := newMem(t)
	require.NoError(t, mem.Fence(bg(), "r", 5, func(context.Context) error { return nil }))
	cg := &countingGuard{Guard: mem}
	called := false
	h := mustMiddleware(t, cg, httpguard.Config{})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { called = true }))
	for _, tc := range garbageTable() {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("x"))
			for k, vs := range tc.hdr {
				req.Header[k] = vs
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			assert.Equal(t, http.StatusBadRequest, rec.Code)
			assert.Equal(t, httpguard.ProblemContentType, rec.Header().Get("Content-Type"))
			resp := rec.Result()
			err := httpguard.ErrorFromResponse(resp)
			var pe *httpguard.ProblemError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, tc.typ, pe.Problem.Type)
			assert.Equal(t, 400, pe.Problem.Status)
			switch tc.typ {
			case httpguard.TypeInvalidToken:
				assert.ErrorIs(t, err, fence.ErrInvalidToken)
			case httpguard.TypeInvalidRun:
				assert.ErrorIs(t, err, fence.ErrInvalidRun)
			default:
				assert.ErrorIs(t, err, fence.ErrInvalidResource)
			}
		})
	}
	assert.Zero(t, cg.calls.Load(), "the guard must not be called")
	assert.False(t, called)
	assert.Equal(t, fence.Token(5), markOf(mem, "r"))
}

// The same table over a real connection, written byte for byte. Every
// request gets 400 and the guard is never called. Values with control
// characters are refused by net/http itself (plain 400); leading/trailing
// whitespace is not part of a header value on the wire (RFC 9110 §5.5) and
// is skipped here; TestWireWhitespaceIsNotPartOfValue covers it.
func TestGarbageHeadersOverTheWire(t *testing.T) {
	mem := newMem(t)
	require.NoError(t, mem.Fence(bg(), "r", 5, func(context.Context) error { return nil }))
	cg := &countingGuard{Guard: mem}
	srv, _ := server(t, mustMiddleware(t, cg, httpguard.Config{})(http.NotFoundHandler()))
	for _, tc := range garbageTable() {
		if v := tc.hdr["Fencing-Token"]; len(v) == 1 && strings.TrimSpace(v[0]) != v[0] && strings.TrimSpace(v[0]) != "" {
			continue
		}
		if v := tc.hdr["Fencing-Run"]; len(v) == 1 && strings.TrimSpace(v[0]) != v[0] && strings.TrimSpace(v[0]) != "" {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			b.WriteString("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n")
			for k, vs := range tc.hdr {
				for _, v := range vs {
					fmt.Fprintf(&b, "%s: %s\r\n", k, v)
				}
			}
			b.WriteString("\r\n")
			resp := rawRequest(t, srv.Listener.Addr().String(), b.String())
			assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
		})
	}
	assert.Zero(t, cg.calls.Load(), "the guard must not be called")
	assert.Equal(t, fence.Token(5), markOf(mem, "r"))
}

func rawRequest(t *testing.T, addr, raw string) *http.Response {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = io.WriteString(conn, raw)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func TestWireWhitespaceIsNotPartOfValue(t *testing.T) {
	mem := newMem(t)
	srv, _ := server(t, mustMiddleware(t, mem, httpguard.Config{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})))
	resp := rawRequest(t, srv.Listener.Addr().String(),
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\nFencing-Token: \t 7 \r\nFencing-Resource: r\r\n\r\n")
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)
	assert.Equal(t, fence.Token(7), markOf(mem, "r"))
}

func TestBusyIs503(t *testing.T) {
	srv, client := server(t, mustMiddleware(t, errGuard{fmt.Errorf("x: %w", fence.ErrBusy)}, httpguard.Config{RetryAfter: 2500 * time.Millisecond})(http.NotFoundHandler()))
	resp := get(t, client, srv.URL, fenced(4, "r"), nil)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, "3", resp.Header.Get("Retry-After"))
	err := httpguard.ErrorFromResponse(resp)
	assert.ErrorIs(t, err, fence.ErrBusy)
	_, stale := fence.IsStale(err)
	assert.False(t, stale)
}

// A memguard resource held by a slow request; a second request whose
// context ended while it waits gets 503 with Retry-After (nothing was
// written), not a 500.
func TestEndedRequestContextIs503(t *testing.T) {
	mem := newMem(t)
	inside := make(chan struct{})
	release := make(chan struct{})
	h := mustMiddleware(t, mem, httpguard.Config{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Slow") != "" {
			close(inside)
			<-release
		}
		w.WriteHeader(http.StatusOK)
	}))
	done := make(chan int, 1)
	go func() {
		req := httptest.NewRequest(http.MethodPost, "/", nil)
		req.Header.Set("Fencing-Token", "1")
		req.Header.Set("Fencing-Resource", "r")
		req.Header.Set("X-Slow", "1")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		done <- rec.Code
	}()
	<-inside
	ctx, cancel := context.WithCancel(bg())
	cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/", nil)
	req.Header.Set("Fencing-Token", "2")
	req.Header.Set("Fencing-Resource", "r")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Equal(t, "1", rec.Header().Get("Retry-After"))
	close(release)
	assert.Equal(t, http.StatusOK, <-done)
	assert.Equal(t, fence.Token(1), markOf(mem, "r"))
}

func TestInternalErrorIs500WithoutLeak(t *testing.T) {
	secret := errors.New("dial postgres://admin:hunter2@db.internal:5432 failed")
	var logged error
	cfg := httpguard.Config{ErrorLog: func(_ *http.Request, err error) { logged = err }}
	srv, client := server(t, mustMiddleware(t, errGuard{secret}, cfg)(http.NotFoundHandler()))
	resp := get(t, client, srv.URL, fenced(4, "r"), nil)
	assert.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	body, _ := io.ReadAll(resp.Body)
	assert.NotContains(t, string(body), "hunter2")
	assert.NotContains(t, string(body), "postgres")
	assert.Contains(t, string(body), httpguard.TypeInternal)
	assert.Equal(t, secret, logged)
}

// A guard that reports success without running write must not make the
// middleware relay an empty success.
func TestGuardThatSkipsWriteIs500(t *testing.T) {
	srv, client := server(t, mustMiddleware(t, errGuard{nil}, httpguard.Config{})(http.NotFoundHandler()))
	assert.Equal(t, http.StatusInternalServerError, get(t, client, srv.URL, fenced(4, "r"), nil).StatusCode)
}

func TestGuardRefusesInputIs400(t *testing.T) {
	for _, sentinel := range []error{fence.ErrInvalidToken, fence.ErrInvalidResource} {
		srv, client := server(t, mustMiddleware(t, errGuard{fmt.Errorf("stricter rules: %w", sentinel)}, httpguard.Config{})(http.NotFoundHandler()))
		resp := get(t, client, srv.URL, fenced(4, "r"), nil)
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
		assert.ErrorIs(t, httpguard.ErrorFromResponse(resp), sentinel)
	}
}

func TestResponseTooLarge(t *testing.T) {
	mem := newMem(t)
	h := mustMiddleware(t, mem, httpguard.Config{MaxResponseBytes: 10})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "0123456789abc")
	}))
	srv, client := server(t, h)
	resp := get(t, client, srv.URL, fenced(4, "r"), nil)
	assert.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	assert.Equal(t, fence.Token(0), markOf(mem, "r"))
}

func TestResourceFunc(t *testing.T) {
	mem := newMem(t)
	cfg := httpguard.Config{
		TokenHeader: "X-Run-Token",
		Resource: func(r *http.Request) (string, error) {
			id := strings.TrimPrefix(r.URL.Path, "/sessions/")
			if id == r.URL.Path || id == "" {
				return "", errors.New("no session id")
			}
			return "session/" + id, nil
		},
	}
	srv, _ := server(t, mustMiddleware(t, mem, cfg)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, _ := httpguard.ResourceFromContext(r.Context())
		_, _ = io.WriteString(w, res)
	})))
	client := &http.Client{Transport: &httpguard.Transport{TokenHeader: "X-Run-Token", Base: srv.Client().Transport}}
	resp := get(t, client, srv.URL+"/sessions/abc", fence.WithToken(bg(), 6), map[string][]string{"Fencing-Resource": {"ignored"}})
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	body, _ := io.ReadAll(resp.Body)
	assert.Equal(t, "session/abc", string(body))
	assert.Equal(t, fence.Token(6), markOf(mem, "session/abc"))
	assert.Equal(t, fence.Token(0), markOf(mem, "ignored"))

	resp = get(t, client, srv.URL+"/other", fence.WithToken(bg(), 6), nil)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.ErrorIs(t, httpguard.ErrorFromResponse(resp), fence.ErrInvalidResource)

	// The default token header is not read when another is configured.
	resp = get(t, &http.Client{Transport: &httpguard.Transport{Base: srv.Client().Transport}}, srv.URL+"/sessions/abc", fence.WithToken(bg(), 7), nil)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Equal(t, fence.Token(6), markOf(mem, "session/abc"))
}

func TestMiddlewareConfig(t *testing.T) {
	mem := newMem(t)
	_, err := httpguard.Middleware(nil, httpguard.Config{})
	assert.ErrorIs(t, err, fence.ErrInvalidConfig)
	for _, cfg := range []httpguard.Config{
		{TokenHeader: "Bad Header"},
		{TokenHeader: "a:b"},
		{ResourceHeader: "x\r\nInjected: 1"},
		{ResourceHeader: "é"},
		{TokenHeader: "same", ResourceHeader: "Same"},
		{RunHeader: "bad header"},
		{RunHeader: "fencing-token"},
		{RunHeader: "X-R", ResourceHeader: "x-r"},
		{RetryAfter: -time.Second},
		{MaxResponseBytes: -1},
	} {
		_, err := httpguard.Middleware(mem, cfg)
		assert.ErrorIs(t, err, fence.ErrInvalidConfig, "%+v", cfg)
	}
}

// recordingRT records the request it was given.
type recordingRT struct{ got *http.Request }

func (r *recordingRT) RoundTrip(req *http.Request) (*http.Response, error) {
	r.got = req
	return &http.Response{StatusCode: 204, Body: http.NoBody, Request: req}, nil
}

type closeTracker struct {
	io.Reader
	closed bool
}

func (c *closeTracker) Close() error { c.closed = true; return nil }

func TestTransport(t *testing.T) {
	rt := &recordingRT{}
	tr := &httpguard.Transport{Base: rt}

	req, _ := http.NewRequestWithContext(fenced(42, "reports/q3"), http.MethodPut, "http://x/", nil)
	req.Header.Set("Fencing-Token", "1")
	_, err := tr.RoundTrip(req)
	require.NoError(t, err)
	assert.Equal(t, "42", rt.got.Header.Get("Fencing-Token"))
	assert.Equal(t, "reports/q3", rt.got.Header.Get("Fencing-Resource"))
	assert.Equal(t, "1", req.Header.Get("Fencing-Token"), "the caller's request is not modified")
	assert.Empty(t, req.Header.Get("Fencing-Resource"))

	// No token or resource in ctx: passes through unchanged.
	plain, _ := http.NewRequest(http.MethodGet, "http://x/", nil)
	_, err = tr.RoundTrip(plain)
	require.NoError(t, err)
	assert.Same(t, plain, rt.got)

	// Invalid token in ctx counts as none.
	inv, _ := http.NewRequestWithContext(fence.WithToken(bg(), 0), http.MethodGet, "http://x/", nil)
	_, err = tr.RoundTrip(inv)
	require.NoError(t, err)
	assert.Empty(t, rt.got.Header.Get("Fencing-Token"))

	// Invalid resource: typed error, body closed, nothing sent.
	rt.got = nil
	body := &closeTracker{Reader: strings.NewReader("x")}
	bad, _ := http.NewRequestWithContext(fenced(3, "a\nb"), http.MethodPost, "http://x/", body)
	resp, err := tr.RoundTrip(bad)
	assert.Nil(t, resp)
	assert.ErrorIs(t, err, fence.ErrInvalidResource)
	assert.True(t, body.closed)
	assert.Nil(t, rt.got)

	// Custom header names.
	tr2 := &httpguard.Transport{Base: rt, TokenHeader: "X-T", ResourceHeader: "X-R"}
	req2, _ := http.NewRequestWithContext(fenced(5, "r"), http.MethodPost, "http://x/", nil)
	_, err = tr2.RoundTrip(req2)
	require.NoError(t, err)
	assert.Equal(t, "5", rt.got.Header.Get("X-T"))
	assert.Equal(t, "r", rt.got.Header.Get("X-R"))
}
