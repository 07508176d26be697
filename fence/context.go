package fence

import (
	"context"
	"errors"
	"fmt"
)

type ctxKey struct{}

// WithToken returns a copy of ctx that carries t with no run identity. Code
// deep in a call chain (a tool implementation, an HTTP client transport) finds
// it with FromContext or ClaimFromContext.
func WithToken(ctx context.Context, t Token) context.Context {
	return WithClaim(ctx, Claim{Token: t})
}

// WithClaim returns a copy of ctx that carries c: a token and, optionally, the
// identity of the run that was granted it. A lease's context carries its
// claim already; WithClaim is for tokens that come from elsewhere.
func WithClaim(ctx context.Context, c Claim) context.Context {
	return context.WithValue(ctx, ctxKey{}, c)
}

// FromContext returns the token carried by ctx, if any valid one is set.
func FromContext(ctx context.Context) (Token, bool) {
	c, ok := ctx.Value(ctxKey{}).(Claim)
	return c.Token, ok && c.Token.Valid()
}

// ClaimFromContext returns the claim carried by ctx. It returns an error
// matching [ErrNoToken] when ctx carries none, and one matching
// [ErrInvalidToken] or [ErrInvalidRun] when the claim carried is malformed.
// The ctx-first forms of every guard call it before they touch the store.
func ClaimFromContext(ctx context.Context) (Claim, error) {
	c, ok := ctx.Value(ctxKey{}).(Claim)
	if !ok {
		return Claim{}, ErrNoToken
	}
	if err := c.Validate(); err != nil {
		return Claim{}, err
	}
	return c, nil
}

// ClaimFor returns the claim for an explicitly passed token: token, with the
// run identity that ctx carries if ctx's claim is for the same token, and no
// run identity otherwise (a token from another source is never paired with a
// run it was not granted to).
func ClaimFor(ctx context.Context, token Token) Claim {
	if c, ok := ctx.Value(ctxKey{}).(Claim); ok && c.Token == token && c.Token.Valid() {
		return c
	}
	return Claim{Token: token}
}

// ContextError returns nil while ctx is live. Once ctx has ended it returns an
// error that matches both ctx.Err() (context.Canceled or
// context.DeadlineExceeded) and context.Cause(ctx) with errors.Is, so a write
// refused because its lease was lost reports the lease's cause (for example
// lease.ErrTrustExpired) and never looks like a busy resource.
func ContextError(ctx context.Context) error {
	err := ctx.Err()
	if err == nil {
		return nil
	}
	cause := context.Cause(ctx)
	if cause == nil || errors.Is(cause, err) {
		return err
	}
	return &ContextEndedError{Err: err, Cause: cause}
}

// WrapContext returns err unchanged while ctx is live. Once ctx has ended it
// returns an error that matches err, ctx.Err() and context.Cause(ctx): guards
// use it on every error path so that a store error caused by cancellation is
// reported as the cancellation (with its cause), not as ErrBusy.
func WrapContext(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	cerr := ContextError(ctx)
	if cerr == nil || errors.Is(err, cerr) {
		return err
	}
	return &ContextEndedError{Err: cerr, Cause: err}
}

// ContextEndedError reports a guarded call that stopped because its context
// ended. It matches both Err (the context's error) and Cause (why it ended,
// or the store error seen when it did).
type ContextEndedError struct {
	Err   error // ctx.Err(): context.Canceled or context.DeadlineExceeded
	Cause error // context.Cause(ctx), or the store's error
}

func (e *ContextEndedError) Error() string {
	return fmt.Sprintf("fence: context ended: %v (%v)", e.Err, e.Cause)
}

// Unwrap returns both errors, so errors.Is matches either.
func (e *ContextEndedError) Unwrap() []error { return []error{e.Err, e.Cause} }
