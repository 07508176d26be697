package memguard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/metric"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/obs"
)

// ErrNilWrite is returned by Fence when write is nil. Nothing changes.
var ErrNilWrite = errors.New("memguard: nil write function")

// Config configures a Guard. The zero value is valid.
type Config struct {
	// MeterProvider records fencekit.guard.accepted, fencekit.guard.stale
	// and fencekit.guard.token_gap with guard="memory" (see
	// docs/operations.md). Nil records nothing.
	MeterProvider metric.MeterProvider
}

// ErrInvalidConfig is returned by New when the MeterProvider cannot create
// the guard's instruments.
var ErrInvalidConfig = errors.New("memguard: invalid config")

// Guard is an in-process fence.Guard. It is safe for concurrent use.
type Guard struct {
	mu      sync.Mutex
	entries map[string]*entry
	met     *obs.Guard
}

type entry struct {
	lock chan struct{} // one slot: held while a Fence call is deciding/writing
	mark atomic.Int64  // written only while holding lock; read by Mark without it
}

var _ fence.Guard = (*Guard)(nil)

// New returns an empty Guard: every resource starts with no mark.
func New(cfg Config) (*Guard, error) {
	met, err := obs.NewGuard(cfg.MeterProvider, obs.KindMemory)
	if err != nil {
		return nil, fmt.Errorf("%w: MeterProvider: %w", ErrInvalidConfig, err)
	}
	return &Guard{entries: map[string]*entry{}, met: met}, nil
}

func (g *Guard) entry(resource string) *entry {
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.entries[resource]
	if e == nil {
		e = &entry{lock: make(chan struct{}, 1)}
		g.entries[resource] = e
	}
	return e
}

// Fence implements fence.Guard. It validates resource and token
// (fence.CheckArgs), waits for the resource's lock (bounded by ctx), and
// while holding it applies fence.Decide, runs write, and raises the mark if
// write returns nil. The error of write is returned as is.
func (g *Guard) Fence(ctx context.Context, resource string, token fence.Token, write func(ctx context.Context) error) error {
	if err := fence.CheckArgs(resource, token); err != nil {
		return err
	}
	if write == nil {
		return ErrNilWrite
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memguard: %q: %w: %w", resource, fence.ErrBusy, err)
	}
	e := g.entry(resource)
	select {
	case e.lock <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("memguard: waiting for %q: %w: %w", resource, fence.ErrBusy, ctx.Err())
	}
	defer func() { <-e.lock }()
	mark := fence.Token(e.mark.Load())
	if err := fence.Decide(resource, token, mark); err != nil {
		g.met.Decision(ctx, err)
		return err
	}
	if err := write(ctx); err != nil {
		return err
	}
	if token > mark {
		e.mark.Store(int64(token))
	}
	g.met.Accepted(ctx)
	return nil
}

// Mark returns the high-water mark of resource: the highest token a write
// to it has succeeded with, or 0 when none has. It does not wait for a Fence
// call in progress: a write still running is not counted.
func (g *Guard) Mark(resource string) fence.Token {
	g.mu.Lock()
	e := g.entries[resource]
	g.mu.Unlock()
	if e == nil {
		return 0
	}
	return fence.Token(e.mark.Load())
}
