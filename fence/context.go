package fence

import "context"

type ctxKey struct{}

// WithToken returns a copy of ctx that carries t. Code deep in a call chain
// (a tool implementation, an HTTP client transport) finds it with FromContext.
func WithToken(ctx context.Context, t Token) context.Context {
	return context.WithValue(ctx, ctxKey{}, t)
}

// FromContext returns the token carried by ctx, if any valid one is set.
func FromContext(ctx context.Context) (Token, bool) {
	t, ok := ctx.Value(ctxKey{}).(Token)
	return t, ok && t.Valid()
}
