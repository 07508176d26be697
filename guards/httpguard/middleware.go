package httpguard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardobs"
)

// Default header names.
const (
	DefaultTokenHeader    = "Fencing-Token"
	DefaultResourceHeader = "Fencing-Resource"
	DefaultRunHeader      = "Fencing-Run"
	DefaultScopeHeader    = "Fencing-Scope"
)

// Defaults of Config.
const (
	DefaultRetryAfter       = time.Second
	DefaultMaxResponseBytes = 8 << 20
)

// Config configures Middleware. The zero value is valid.
type Config struct {
	// TokenHeader carries the fencing token, in the canonical decimal form
	// of fence.Parse. Default "Fencing-Token".
	TokenHeader string
	// RunHeader carries the optional run identity of the token's holder
	// (fence.ValidateRun rules, non-empty). Default "Fencing-Run".
	RunHeader string
	// ScopeHeader carries the optional scope of the claim (the lease key's
	// scope, fence.ValidateScope rules, non-empty). Default "Fencing-Scope".
	ScopeHeader string
	// Strict answers 403 out-of-scope, without calling the guard, to every
	// request whose resource lies outside its claim's scope, or whose
	// claim has no scope (fence.CheckScope): a claim for one lease key can
	// then never raise the mark of another key's resource. Off by default:
	// the scope is passed on to the guard (which may itself be strict) and
	// otherwise ignored.
	Strict bool
	// ResourceHeader carries the resource name (fence.ValidateResource
	// rules, verbatim, no encoding). Default "Fencing-Resource". Ignored
	// when Resource is set.
	ResourceHeader string
	// Resource, when set, derives the resource from the request (for example
	// from its path) instead of ResourceHeader. An error from it is answered
	// with 400 invalid-resource.
	Resource func(*http.Request) (string, error)
	// RetryAfter is sent (rounded up to whole seconds) in the Retry-After
	// header of 503 busy answers. Default 1s.
	RetryAfter time.Duration
	// MaxResponseBytes bounds the buffered response body of the handler. A
	// handler writing more fails its write (the mark is not raised) and the
	// client gets a 500 problem. Default 8 MiB.
	MaxResponseBytes int
	// ErrorLog, when set, receives guard errors that are answered with 500
	// (their text is not sent to the client).
	ErrorLog func(r *http.Request, err error)
	// Logger receives one Error record per request refused because its
	// token was reused by another run (resource, token and both runs). Nil
	// discards.
	Logger *slog.Logger
	// MeterProvider records fencekit.guard.accepted (requests whose handler
	// ran and answered below 400 under an admitted token),
	// fencekit.guard.stale and fencekit.guard.token_gap (409 stale-token
	// answers) and fencekit.guard.reused (409 token-reused answers) with
	// guard="http" (see docs/operations.md). The guard passed to Middleware
	// may record its own decisions under its own kind. Nil records nothing.
	MeterProvider metric.MeterProvider
	// TracerProvider records one span ("fencekit.guard.write", a child of the
	// span in the request's context) per request that reached the guard,
	// and per request refused as out of scope (Strict). The guard passed
	// to Middleware may record its own span, a child of this one. Nil
	// records none.
	TracerProvider trace.TracerProvider
}

// ErrResponseTooLarge is returned by the buffered ResponseWriter's Write once
// the handler has written more than Config.MaxResponseBytes.
var ErrResponseTooLarge = errors.New("httpguard: handler response over MaxResponseBytes")

// validHeaderName reports whether s is an RFC 9110 field name (a token).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), c) >= 0:
		default:
			return false
		}
	}
	return true
}

func (cfg Config) withDefaults() (Config, error) {
	if cfg.TokenHeader == "" {
		cfg.TokenHeader = DefaultTokenHeader
	}
	if cfg.ResourceHeader == "" {
		cfg.ResourceHeader = DefaultResourceHeader
	}
	if cfg.RunHeader == "" {
		cfg.RunHeader = DefaultRunHeader
	}
	if cfg.ScopeHeader == "" {
		cfg.ScopeHeader = DefaultScopeHeader
	}
	if cfg.RetryAfter == 0 {
		cfg.RetryAfter = DefaultRetryAfter
	}
	if cfg.MaxResponseBytes == 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
	}
	switch {
	case !validHeaderName(cfg.TokenHeader):
		return cfg, configErr("TokenHeader", fmt.Sprintf("%q is not a header field name", cfg.TokenHeader), nil)
	case !validHeaderName(cfg.ResourceHeader):
		return cfg, configErr("ResourceHeader", fmt.Sprintf("%q is not a header field name", cfg.ResourceHeader), nil)
	case !validHeaderName(cfg.RunHeader):
		return cfg, configErr("RunHeader", fmt.Sprintf("%q is not a header field name", cfg.RunHeader), nil)
	case http.CanonicalHeaderKey(cfg.TokenHeader) == http.CanonicalHeaderKey(cfg.ResourceHeader):
		return cfg, configErr("ResourceHeader", fmt.Sprintf("%q is also the token header", cfg.TokenHeader), nil)
	case http.CanonicalHeaderKey(cfg.RunHeader) == http.CanonicalHeaderKey(cfg.TokenHeader),
		http.CanonicalHeaderKey(cfg.RunHeader) == http.CanonicalHeaderKey(cfg.ResourceHeader):
		return cfg, configErr("RunHeader", fmt.Sprintf("%q is also the token or resource header", cfg.RunHeader), nil)
	case !validHeaderName(cfg.ScopeHeader):
		return cfg, configErr("ScopeHeader", fmt.Sprintf("%q is not a header field name", cfg.ScopeHeader), nil)
	case http.CanonicalHeaderKey(cfg.ScopeHeader) == http.CanonicalHeaderKey(cfg.TokenHeader),
		http.CanonicalHeaderKey(cfg.ScopeHeader) == http.CanonicalHeaderKey(cfg.ResourceHeader),
		http.CanonicalHeaderKey(cfg.ScopeHeader) == http.CanonicalHeaderKey(cfg.RunHeader):
		return cfg, configErr("ScopeHeader", fmt.Sprintf("%q is also the token, resource or run header", cfg.ScopeHeader), nil)
	case cfg.RetryAfter < 0:
		return cfg, configErr("RetryAfter", "negative", nil)
	case cfg.MaxResponseBytes < 0:
		return cfg, configErr("MaxResponseBytes", "negative", nil)
	}
	cfg.TokenHeader = http.CanonicalHeaderKey(cfg.TokenHeader)
	cfg.ResourceHeader = http.CanonicalHeaderKey(cfg.ResourceHeader)
	cfg.RunHeader = http.CanonicalHeaderKey(cfg.RunHeader)
	cfg.ScopeHeader = http.CanonicalHeaderKey(cfg.ScopeHeader)
	return cfg, nil
}

// Middleware returns server middleware that fences every request it
// handles with g. See the package documentation for the protocol. It
// returns a *fence.ConfigError (fence.ErrInvalidConfig) for a nil g or a
// bad cfg.
func Middleware(g fence.Guard, cfg Config) (func(http.Handler) http.Handler, error) {
	if g == nil {
		return nil, configErr("g", "nil guard", nil)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	met, err := guardobs.New(guardobs.Config{Kind: "http", Name: "httpguard",
		MeterProvider: cfg.MeterProvider, TracerProvider: cfg.TracerProvider, Logger: cfg.Logger})
	if err != nil {
		return nil, configErr("MeterProvider", "instruments", err)
	}
	m := &middleware{g: g, cfg: cfg, met: met, retryAfter: strconv.FormatInt(int64((cfg.RetryAfter+time.Second-1)/time.Second), 10)}
	if cfg.RetryAfter < time.Second {
		m.retryAfter = "1"
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
	}, nil
}

type middleware struct {
	g          fence.Guard
	cfg        Config
	met        *guardobs.Recorder
	retryAfter string
}

// single returns the one value of header name, or a reason it has none.
func single(h http.Header, name string) (string, string) {
	vs := h.Values(name)
	switch len(vs) {
	case 0:
		return "", "header " + name + " missing"
	case 1:
		return vs[0], ""
	default:
		return "", "header " + name + " given more than once"
	}
}

// handlerStatusError reports a handler response of status >= 400: Fence's
// write fails so the mark is not raised, and the response is relayed.
type handlerStatusError struct{ status int }

func (e *handlerStatusError) Error() string {
	return fmt.Sprintf("httpguard: handler answered %d", e.status)
}

func (m *middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	raw, why := single(r.Header, m.cfg.TokenHeader)
	if why != "" {
		m.badRequest(w, TypeInvalidToken, "Invalid fencing token", why)
		return
	}
	token, err := fence.Parse(raw)
	if err != nil {
		m.badRequest(w, TypeInvalidToken, "Invalid fencing token",
			"header "+m.cfg.TokenHeader+" must be a positive decimal integer without sign, spaces or leading zeros")
		return
	}
	var run string
	switch vs := r.Header.Values(m.cfg.RunHeader); len(vs) {
	case 0:
	case 1:
		run = vs[0]
		if run == "" || fence.ValidateRun(run) != nil {
			m.badRequest(w, TypeInvalidRun, "Invalid run identity",
				fmt.Sprintf("header %s must be 1-%d bytes of ASCII letters, digits and . _ : -", m.cfg.RunHeader, fence.MaxRunLen))
			return
		}
	default:
		m.badRequest(w, TypeInvalidRun, "Invalid run identity", "header "+m.cfg.RunHeader+" given more than once")
		return
	}
	var scope string
	switch vs := r.Header.Values(m.cfg.ScopeHeader); len(vs) {
	case 0:
	case 1:
		scope = vs[0]
		if scope == "" || fence.ValidateScope(scope) != nil {
			m.badRequest(w, TypeInvalidScope, "Invalid claim scope",
				fmt.Sprintf("header %s must be 1-%d bytes of UTF-8 without control characters, not ending in /", m.cfg.ScopeHeader, fence.MaxResourceLen))
			return
		}
	default:
		m.badRequest(w, TypeInvalidScope, "Invalid claim scope", "header "+m.cfg.ScopeHeader+" given more than once")
		return
	}
	claim := fence.Claim{Token: token, Run: run, Scope: scope}
	var resource string
	if m.cfg.Resource != nil {
		resource, err = m.cfg.Resource(r)
		if err != nil {
			m.badRequest(w, TypeInvalidResource, "Invalid fencing resource", "the request does not name a valid resource")
			return
		}
	} else {
		resource, why = single(r.Header, m.cfg.ResourceHeader)
		if why != "" {
			m.badRequest(w, TypeInvalidResource, "Invalid fencing resource", why)
			return
		}
	}
	if err := fence.ValidateResource(resource); err != nil {
		m.badRequest(w, TypeInvalidResource, "Invalid fencing resource", "resource name must be 1-512 bytes of UTF-8 without control characters")
		return
	}
	if m.cfg.Strict {
		if err := fence.CheckScope(resource, claim); err != nil {
			m.met.Refused(r.Context(), resource, claim, err)
			m.guardError(w, r, resource, token, err)
			return
		}
	}

	var rec *bufferedResponse
	// The claim goes into the guard's ctx too: a guard pairs the token with
	// the run identity through fence.ClaimFor.
	sctx, span := m.met.Start(r.Context(), resource, claim)
	err = m.g.Fence(fence.WithClaim(sctx, claim), resource, token, func(ctx context.Context) error {
		rec = &bufferedResponse{header: http.Header{}, limit: m.cfg.MaxResponseBytes}
		ctx = WithResource(fence.WithClaim(ctx, claim), resource)
		next.ServeHTTP(rec, r.WithContext(ctx))
		if rec.tooLarge {
			return ErrResponseTooLarge
		}
		if st := rec.statusCode(); st >= 400 {
			return &handlerStatusError{status: st}
		}
		return nil
	})
	span.End(err)
	var hs *handlerStatusError
	switch {
	case rec == nil && (err == nil || errors.As(err, &hs)):
		// The guard reported success without running the handler.
		m.guardError(w, r, resource, token, errors.New("httpguard: guard returned without running the handler"))
	case err == nil, errors.As(err, &hs):
		if err == nil {
			m.met.Accepted(r.Context())
		}
		rec.relay(w)
	default:
		m.met.Decision(r.Context(), err) // counts stale and reuse refusals only; logs a reuse
		m.guardError(w, r, resource, token, err)
	}
}

func (m *middleware) badRequest(w http.ResponseWriter, typ, title, detail string) {
	writeProblem(w, Problem{Type: typ, Title: title, Status: http.StatusBadRequest, Detail: detail})
}

func (m *middleware) guardError(w http.ResponseWriter, r *http.Request, resource string, token fence.Token, err error) {
	if se, ok := fence.IsStale(err); ok {
		writeProblem(w, Problem{
			Type:           TypeStaleToken,
			Title:          "Stale fencing token",
			Status:         http.StatusConflict,
			Detail:         fmt.Sprintf("token %d is below token %d, which this resource has already accepted", se.Presented, se.Highest),
			Resource:       resource,
			PresentedToken: se.Presented.String(),
			HighestToken:   se.Highest.String(),
		})
		return
	}
	if re, ok := fence.IsReused(err); ok {
		writeProblem(w, Problem{
			Type:           TypeTokenReused,
			Title:          "Fencing token reused",
			Status:         http.StatusConflict,
			Detail:         fmt.Sprintf("token %d was accepted for this resource from another run: the token was issued twice", re.Token),
			Resource:       resource,
			PresentedToken: re.Token.String(),
			Run:            re.Run,
			MarkRun:        re.MarkRun,
		})
		return
	}
	if se, ok := fence.IsOutOfScope(err); ok {
		writeProblem(w, Problem{
			Type:     TypeOutOfScope,
			Title:    "Resource outside the claim's scope",
			Status:   http.StatusForbidden,
			Detail:   se.Error(),
			Resource: resource,
			Scope:    se.Scope,
		})
		return
	}
	switch {
	case errors.Is(err, fence.ErrOutcomeUnknown):
		// Before the context-ended case: the guard's commit may have been
		// applied, so "nothing was written" would be false.
		if m.cfg.ErrorLog != nil {
			m.cfg.ErrorLog(r, err)
		}
		writeProblem(w, Problem{Type: TypeOutcomeUnknown, Title: "Outcome unknown", Status: http.StatusInternalServerError,
			Detail:   "the guard's commit was sent and no answer came back: the write may have been applied; read it back, or retry with the same token",
			Resource: resource})
	case errors.Is(err, fence.ErrBusy):
		w.Header().Set("Retry-After", m.retryAfter)
		writeProblem(w, Problem{Type: TypeBusy, Title: "Resource busy", Status: http.StatusServiceUnavailable,
			Detail: "the resource could not decide now; retry with the same token", Resource: resource})
	case r.Context().Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		// The request's own context ended (the client went away, the
		// server is shutting down) before the guard decided: nothing was
		// written, and a client still listening may retry.
		w.Header().Set("Retry-After", m.retryAfter)
		writeProblem(w, Problem{Type: TypeBusy, Title: "Resource busy", Status: http.StatusServiceUnavailable,
			Detail: "the request ended before the guard decided; nothing was written", Resource: resource})
	case errors.Is(err, fence.ErrInvalidToken):
		m.badRequest(w, TypeInvalidToken, "Invalid fencing token", "the guard refused the token")
	case errors.Is(err, fence.ErrInvalidRun):
		m.badRequest(w, TypeInvalidRun, "Invalid run identity", "the guard refused the run identity")
	case errors.Is(err, fence.ErrInvalidScope):
		m.badRequest(w, TypeInvalidScope, "Invalid claim scope", "the guard refused the claim's scope")
	case errors.Is(err, fence.ErrInvalidResource):
		writeProblem(w, Problem{Type: TypeInvalidResource, Title: "Invalid fencing resource", Status: http.StatusBadRequest,
			Detail: "the guard refused the resource name"})
	default:
		if m.cfg.ErrorLog != nil {
			m.cfg.ErrorLog(r, err)
		}
		detail := "the guard failed; the write was not committed"
		if errors.Is(err, ErrResponseTooLarge) {
			detail = "the handler's response was too large; the write was not committed"
		}
		writeProblem(w, Problem{Type: TypeInternal, Title: "Internal Server Error", Status: http.StatusInternalServerError, Detail: detail})
	}
}

// bufferedResponse holds the handler's response until the guard decided.
type bufferedResponse struct {
	header   http.Header
	status   int
	body     bytes.Buffer
	limit    int
	tooLarge bool
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(code int) {
	if b.status != 0 || code < 200 { // informational responses are dropped
		return
	}
	b.status = code
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	if b.tooLarge || b.body.Len()+len(p) > b.limit {
		b.tooLarge = true
		return 0, ErrResponseTooLarge
	}
	return b.body.Write(p)
}

func (b *bufferedResponse) statusCode() int {
	if b.status == 0 {
		return http.StatusOK
	}
	return b.status
}

func (b *bufferedResponse) relay(w http.ResponseWriter) {
	h := w.Header()
	for k, vs := range b.header {
		h[k] = vs
	}
	w.WriteHeader(b.statusCode())
	_, _ = w.Write(b.body.Bytes())
}

// configErr is the *fence.ConfigError of a httpguard Config field.
func configErr(field, reason string, err error) error {
	return &fence.ConfigError{Source: "httpguard", Field: field, Reason: reason, Err: err}
}
