package redisguard

import (
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// ErrInvalidConfig is matched by every error New returns for a bad Config.
var ErrInvalidConfig = errors.New("redisguard: invalid config")

// ErrEvictionPolicy is matched by an *EvictionError: the server may evict
// keys that have no TTL, marks among them.
var ErrEvictionPolicy = errors.New("redisguard: server may evict marks")

// errUnsettled is settle's answer when it could not decide the outcome of
// a write whose reply was lost.
var errUnsettled = errors.New("redisguard: outcome not settled")

// EvictionError reports a server whose maxmemory-policy may evict keys
// without a TTL (allkeys-lru, allkeys-lfu, allkeys-random). It matches
// ErrEvictionPolicy.
type EvictionError struct {
	Addr   string // the server, as the client names it
	Policy string // its maxmemory-policy
}

// Error implements error.
func (e *EvictionError) Error() string {
	return fmt.Sprintf("redisguard: server %s has maxmemory-policy %s, which may evict marks (set Config.AllowEviction to accept it)", e.Addr, e.Policy)
}

// Is reports whether target is ErrEvictionPolicy.
func (e *EvictionError) Is(target error) bool { return target == ErrEvictionPolicy }

// ForeignError reports a resource whose stored mark or value key is not
// what this guard writes (a mark hash with a malformed token or run, a
// mark key of another type, a value key that is not a string). It matches
// fence.ErrForeign. Nothing is written.
type ForeignError struct {
	Resource string
	Key      string // the offending key
	Reason   string
}

// Error implements error.
func (e *ForeignError) Error() string {
	return fmt.Sprintf("redisguard: %q: key %q: %s", e.Resource, e.Key, e.Reason)
}

// Is reports whether target is fence.ErrForeign.
func (e *ForeignError) Is(target error) bool { return target == fence.ErrForeign }

// NotFoundError reports a resource without a value. It matches
// fence.ErrNotFound.
type NotFoundError struct {
	Resource string
	// Token is the resource's mark: the token of the write that deleted
	// the value (or of the last write, whose value has expired, or of a
	// Fence that staged nothing); zero when the resource was never
	// written.
	Token fence.Token
}

// Error implements error.
func (e *NotFoundError) Error() string {
	if e.Token != 0 {
		return fmt.Sprintf("redisguard: %q not found (mark %d: no value)", e.Resource, e.Token)
	}
	return fmt.Sprintf("redisguard: %q not found", e.Resource)
}

// Is reports whether target is fence.ErrNotFound.
func (e *NotFoundError) Is(target error) bool { return target == fence.ErrNotFound }

// ErrClockSkew is matched by a *ClockError: this host's clock and the
// server's differ by more than a write's deadline allows. Nothing is
// written.
var ErrClockSkew = errors.New("redisguard: clocks of host and server differ too much")

// ClockError reports a write the server refused because its deadline
// (this host's clock at sending plus Config.DuplicateWindow) had passed on
// arrival although the request was young, or lay more than two windows
// ahead of the server's clock. Nothing was written. It matches
// ErrClockSkew.
type ClockError struct {
	Resource string
	Window   time.Duration // Config.DuplicateWindow
	// Offset is the server's clock at arrival minus this host's at sending
	// (the request's transit time included): positive when the server is
	// ahead.
	Offset time.Duration
}

// Error implements error.
func (e *ClockError) Error() string {
	return fmt.Sprintf("redisguard: write %q refused: the server's clock at arrival minus this host's at sending is %v, beyond what the duplicate window %v allows (check both clocks); nothing written",
		e.Resource, e.Offset, e.Window)
}

// Is reports whether target is ErrClockSkew.
func (e *ClockError) Is(target error) bool { return target == ErrClockSkew }
