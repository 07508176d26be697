package effects

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Sentinel errors. Match them with errors.Is; the typed errors below carry
// details and match the corresponding sentinel. An invalid Config, Target
// or RelayConfig field is a *fence.ConfigError (Source "effects"), which
// matches fence.ErrInvalidConfig. Refusals of a stale claim
// match fence.ErrStale (see Outbox.Record), a missing effect matches
// fence.ErrNotFound and nil arguments match fence.ErrNilArgument.
var (
	// ErrInvalidEffect is matched by every *InputError: an effect refused
	// before any I/O (empty, too long or NUL request key, oversized or
	// malformed request, no lease key). Nothing was recorded.
	ErrInvalidEffect = errors.New("effects: invalid effect")
	// ErrUnknownTarget is matched by the error of a Record naming a target
	// the Outbox was not configured with. Nothing was recorded.
	ErrUnknownTarget = errors.New("effects: unknown target")
	// ErrConflict is matched by a *ConflictError: the request key was
	// already recorded for the lease key with another target or request.
	ErrConflict = errors.New("effects: request key reused with another request")
	// ErrNotPending is returned by Cancel for an effect that is final or
	// claimed by a relay, and by Retry for one that is not ambiguous or
	// rejected. Nothing changed.
	ErrNotPending = errors.New("effects: effect not in a state that allows this")
	// ErrStopped is returned by Relay.Start after Stop.
	ErrStopped = errors.New("effects: relay stopped")
)

// InputError describes an effect refused before any I/O. It matches
// ErrInvalidEffect.
type InputError struct {
	Field  string // "RequestKey", "Request", "Target", "Key"
	Reason string
}

// Error implements error.
func (e *InputError) Error() string {
	return fmt.Sprintf("effects: invalid effect %s: %s", e.Field, e.Reason)
}

// Is reports whether target is ErrInvalidEffect.
func (e *InputError) Is(target error) bool { return target == ErrInvalidEffect }

// ConflictError reports a request key recorded before, for the same lease
// key, with another target or request. It matches ErrConflict. Nothing new
// was recorded.
type ConflictError struct {
	RequestKey string
	Existing   uuid.UUID // the effect recorded first under the key
}

// Error implements error.
func (e *ConflictError) Error() string {
	return fmt.Sprintf("effects: request key %q was recorded as effect %s with another target or request", e.RequestKey, e.Existing)
}

// Is reports whether target is ErrConflict.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// RejectedError is a Deliverer's report that the target refused the request
// for good (an HTTP 4xx, an SMTP 5xx reply): the effect ends rejected and
// is not retried. Build it with Reject.
type RejectedError struct {
	Code   int    // the target's status or reply code, 0 when none
	Detail string // the target's explanation, shortened
}

// Error implements error.
func (e *RejectedError) Error() string {
	return fmt.Sprintf("effects: rejected by the target (code %d): %s", e.Code, e.Detail)
}

// Reject returns the *RejectedError a Deliverer returns for a final refusal.
func Reject(code int, detail string) error {
	return &RejectedError{Code: code, Detail: shorten(detail)}
}

// notSentError marks a delivery error after which nothing can have reached
// the target.
type notSentError struct{ err error }

func (e *notSentError) Error() string { return "effects: not sent: " + e.err.Error() }
func (e *notSentError) Unwrap() error { return e.err }

// NotSent wraps err, a Deliverer's error, to say that the request provably
// did not reach the target (a refused connection, a DNS failure): the relay
// may retry even an at-most-once target. Any other error of an at-most-once
// target ends the effect ambiguous.
func NotSent(err error) error {
	if err == nil {
		return nil
	}
	return &notSentError{err: err}
}

func isNotSent(err error) bool {
	var ns *notSentError
	return errors.As(err, &ns)
}

// RetryAfterError is a Deliverer's report that the target asked to be
// called again later (HTTP 429 or 503 with Retry-After). The relay waits at
// least After before the next attempt.
type RetryAfterError struct {
	Err   error
	After time.Duration
}

// Error implements error.
func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("%v (retry after %s)", e.Err, e.After)
}

// Unwrap returns Err.
func (e *RetryAfterError) Unwrap() error { return e.Err }

const maxDetail = 512

func shorten(s string) string {
	if len(s) <= maxDetail {
		return s
	}
	cut := maxDetail
	for cut > 0 && s[cut]&0xc0 == 0x80 { // keep UTF-8 whole
		cut--
	}
	return s[:cut] + "..."
}
