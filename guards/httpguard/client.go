package httpguard

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"

	"github.com/fencekit/fencekit/fence"
)

type resourceKey struct{}

// WithResource returns a copy of ctx naming the resource that requests sent
// with it (through Transport) are fenced on. The middleware also sets it in
// the handler's request context.
func WithResource(ctx context.Context, resource string) context.Context {
	return context.WithValue(ctx, resourceKey{}, resource)
}

// ResourceFromContext returns the resource set by WithResource, if any.
func ResourceFromContext(ctx context.Context) (string, bool) {
	r, ok := ctx.Value(resourceKey{}).(string)
	return r, ok && r != ""
}

// Transport is an http.RoundTripper that adds the fencing headers from the
// request's context: the claim of fence.ClaimFromContext (its token, and its
// run identity when it has one) and the resource of ResourceFromContext. The
// zero value uses http.DefaultTransport and the default header names.
//
// A request whose context names a resource is a fenced request: it must
// carry a valid claim, or it fails before anything is sent with an error
// matching fence.ErrNoToken (no claim), fence.ErrInvalidToken or
// fence.ErrInvalidRun. An invalid resource name fails it with an error
// matching fence.ErrInvalidResource. Without a resource, a valid token in
// the context is sent (an invalid one counts as none) and a request whose
// context has neither passes through unchanged. Headers set replace any
// value already on the request.
//
// Once the request's context has ended, RoundTrip returns
// fence.ContextError (matching ctx.Err() and context.Cause(ctx), for example
// a lease's loss cause) without sending, and an error of Base seen after the
// context ended is wrapped with fence.WrapContext, so it matches the cause
// too.
//
// A fenced request (one that carries a token) that Base fails after it may
// have been sent — its context ended while the reply was awaited, or the
// connection broke — returns a *fence.OutcomeUnknownError
// (fence.ErrOutcomeUnknown, plus ctx.Err() and context.Cause(ctx) when the
// context ended): the service may have applied it. "May have been sent" is
// decided with net/http's client trace when Base is an *http.Transport (or
// nil): no connection obtained means nothing was sent. With any other Base,
// whose sending RoundTrip cannot see, every such failure counts as an
// unknown outcome.
type Transport struct {
	// Base sends the request. Default http.DefaultTransport.
	Base http.RoundTripper
	// TokenHeader, RunHeader, ScopeHeader and ResourceHeader name the
	// headers. Defaults DefaultTokenHeader, DefaultRunHeader,
	// DefaultScopeHeader and DefaultResourceHeader.
	TokenHeader, RunHeader, ScopeHeader, ResourceHeader string
}

// RoundTrip implements http.RoundTripper. It does not modify req.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	ctx := req.Context()
	fail := func(err error) (*http.Response, error) {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, err
	}
	if err := fence.ContextError(ctx); err != nil {
		return fail(err)
	}
	resource, hasResource := ResourceFromContext(ctx)
	claim, err := fence.ClaimFromContext(ctx)
	switch {
	case hasResource && err != nil:
		return fail(err)
	case err != nil && errors.Is(err, fence.ErrInvalidRun):
		return fail(err)
	case err != nil:
		claim = fence.Claim{} // no token, or an invalid one: none sent
	}
	hasToken := claim.Token.Valid()
	if !hasToken && !hasResource {
		resp, err := base.RoundTrip(req)
		return resp, fence.WrapContext(ctx, err)
	}
	if hasResource {
		if err := fence.ValidateResource(resource); err != nil {
			return fail(err)
		}
	}
	var sent atomic.Bool
	tctx := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { sent.Store(true) }})
	out := req.Clone(tctx)
	if hasToken {
		out.Header.Set(orDefault(t.TokenHeader, DefaultTokenHeader), claim.Token.String())
		for _, h := range []struct{ name, v string }{
			{orDefault(t.RunHeader, DefaultRunHeader), claim.Run},
			{orDefault(t.ScopeHeader, DefaultScopeHeader), claim.Scope},
		} {
			if h.v != "" {
				out.Header.Set(h.name, h.v)
			} else {
				out.Header.Del(h.name)
			}
		}
	}
	if hasResource {
		out.Header.Set(orDefault(t.ResourceHeader, DefaultResourceHeader), resource)
	}
	resp, err := base.RoundTrip(out)
	if err == nil {
		return resp, nil
	}
	if _, traced := base.(*http.Transport); hasToken && (sent.Load() || !traced) {
		// The request may have reached the service: its effect is unknown.
		what := resource
		if !hasResource {
			what = req.URL.Redacted()
		}
		return resp, fence.OutcomeUnknown(ctx, "httpguard: "+req.Method, what, err)
	}
	return resp, fence.WrapContext(ctx, err)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
