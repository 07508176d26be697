package httpguard

import (
	"context"
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
// request's context: the token of fence.FromContext and the resource of
// ResourceFromContext. Each header is set (replacing any value already on
// the request) only when its value is in the context; a request whose
// context has neither passes through unchanged. An invalid resource name in
// the context fails the request with an error matching
// fence.ErrInvalidResource before anything is sent. The zero value uses
// http.DefaultTransport and the default header names.
type Transport struct {
	// Base sends the request. Default http.DefaultTransport.
	Base http.RoundTripper
	// TokenHeader and ResourceHeader name the headers. Defaults
	// DefaultTokenHeader and DefaultResourceHeader.
	TokenHeader, ResourceHeader string
}

// RoundTrip implements http.RoundTripper. It does not modify req.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	token, hasToken := fence.FromContext(req.Context())
	resource, hasResource := ResourceFromContext(req.Context())
	if !hasToken && !hasResource {
		return base.RoundTrip(req)
	}
	if hasResource {
		if err := fence.ValidateResource(resource); err != nil {
			if req.Body != nil {
				_ = req.Body.Close()
			}
			return nil, err
		}
	}
	out := req.Clone(req.Context())
	if hasToken {
		out.Header.Set(orDefault(t.TokenHeader, DefaultTokenHeader), token.String())
	}
	if hasResource {
		out.Header.Set(orDefault(t.ResourceHeader, DefaultResourceHeader), resource)
	}
	return base.RoundTrip(out)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
