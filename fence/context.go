package fence

import (
	"context"
	"errors"
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
// run identity and scope that ctx carries if ctx's claim is for the same
// token, and neither otherwise (a token from another source is never paired
// with a run or a key it was not granted to).
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
// reported as the cancellation (with its cause), not as ErrBusy. An err that
// already matches both (one built with ContextError, say) is returned as is,
// so wrapping twice never repeats the context's part of the message.
func WrapContext(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	cerr := ctx.Err()
	if cerr == nil {
		return err
	}
	cause := context.Cause(ctx)
	if cause != nil && errors.Is(cause, cerr) {
		cause = nil // a plain cancellation: the cause says nothing more
	}
	if errors.Is(err, cerr) && (cause == nil || errors.Is(err, cause)) {
		return err
	}
	return &ContextEndedError{Err: cerr, Cause: cause, Store: err}
}

// ContextEndedError reports a guarded call that stopped because its context
// ended. It matches Err (the context's error), Cause (why it ended, when the
// context was cancelled with a cause of its own) and Store (the store's
// error seen when it did, when there was one).
type ContextEndedError struct {
	Err   error // ctx.Err(): context.Canceled or context.DeadlineExceeded
	Cause error // context.Cause(ctx) when it differs from Err; nil otherwise
	Store error // the store error WrapContext wrapped; nil from ContextError
}

// Error formats the context's part once, then the store's error:
// "fence: context ended: context canceled (lease: taken over): pgguard: ...".
func (e *ContextEndedError) Error() string {
	s := "fence: context ended: " + errString(e.Err)
	if e.Cause != nil {
		s += " (" + e.Cause.Error() + ")"
	}
	if e.Store != nil {
		s += ": " + e.Store.Error()
	}
	return s
}

// Unwrap returns the errors set among Err, Cause and Store, so errors.Is
// matches any of them.
func (e *ContextEndedError) Unwrap() []error {
	out := make([]error, 0, 3)
	for _, err := range []error{e.Err, e.Cause, e.Store} {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
