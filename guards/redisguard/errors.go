package redisguard

import (
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fence"
)

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

// configErr is the *fence.ConfigError of a redisguard Config field.
func configErr(field, reason string, err error) error {
	return &fence.ConfigError{Source: "redisguard", Field: field, Reason: reason, Err: err}
}
