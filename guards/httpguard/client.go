package httpguard

import (
	"context"
	"errors"
	"net/http"

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
type Transport struct {
	// Base sends the request. Default http.DefaultTransport.
	Base http.RoundTripper
	// TokenHeader, RunHeader and ResourceHeader name the headers. Defaults
	// DefaultTokenHeader, DefaultRunHeader and DefaultResourceHeader.
	TokenHeader, RunHeader, ResourceHeader string
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
		return t.send(ctx, base, req)
	}
	if hasResource {
		if err := fence.ValidateResource(resource); err != nil {
			return fail(err)
		}
	}
	out := req.Clone(ctx)
	if hasToken {
		out.Header.Set(orDefault(t.TokenHeader, DefaultTokenHeader), claim.Token.String())
		runHeader := orDefault(t.RunHeader, DefaultRunHeader)
		if claim.Run != "" {
			out.Header.Set(runHeader, claim.Run)
		} else {
			out.Header.Del(runHeader)
		}
	}
	if hasResource {
		out.Header.Set(orDefault(t.ResourceHeader, DefaultResourceHeader), resource)
	}
	return t.send(ctx, base, out)
}

func (t *Transport) send(ctx context.Context, base http.RoundTripper, req *http.Request) (*http.Response, error) {
	resp, err := base.RoundTrip(req)
	if err != nil {
		return resp, fence.WrapContext(ctx, err)
	}
	return resp, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
