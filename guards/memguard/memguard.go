package memguard

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardobs"
	"github.com/fencekit/fencekit/guards/internal/engine"
)

// Config configures a Guard. The zero value is valid.
type Config struct {
	// MeterProvider records fencekit.guard.accepted, fencekit.guard.stale,
	// fencekit.guard.token_gap and fencekit.guard.reused with
	// guard="memory" (see docs/operations.md). Nil records nothing.
	MeterProvider metric.MeterProvider
	// Logger receives one Error record per write refused because its token
	// was reused by another run (with the resource, token and both runs).
	// Nil discards.
	Logger *slog.Logger
	// TracerProvider records one span per Fence or Do call that got a
	// claim ("fencekit.guard.write", a child of the span in ctx; write's ctx
	// carries it). Nil records none.
	TracerProvider trace.TracerProvider
	// Strict refuses every write whose resource lies outside its claim's
	// scope, or whose claim has no scope, with a *fence.ScopeError
	// (fence.ErrOutOfScope; see fence.CheckScope) before write is called.
	// Off by default: scopes are ignored.
	Strict bool
}

// Guard is an in-process fence.Guard. It is safe for concurrent use.
type Guard struct {
	mu      sync.Mutex
	entries map[string]*entry
	met     *guardobs.Recorder
	args    engine.Args
}

type entry struct {
	lock chan struct{} // one slot: held while a Fence call is deciding/writing
	mu   sync.Mutex    // guards mark and run together for Mark, which does not take lock
	mark fence.Token   // written only while holding lock and mu
	run  string        // the mark's run identity; written only while holding lock and mu
}

var _ fence.Guard = (*Guard)(nil)

// New returns an empty Guard: every resource starts with no mark.
func New(cfg Config) (*Guard, error) {
	met, err := guardobs.New(guardobs.Config{Kind: "memory", Name: "memguard",
		MeterProvider: cfg.MeterProvider, TracerProvider: cfg.TracerProvider, Logger: cfg.Logger})
	if err != nil {
		return nil, &fence.ConfigError{Source: "memguard", Field: "MeterProvider", Reason: "instruments", Err: err}
	}
	return &Guard{entries: map[string]*entry{}, met: met,
		args: engine.Args{Name: "memguard", Strict: cfg.Strict, Rec: met}}, nil
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

// Do is the ctx-first form of Fence: it runs write under the claim ctx
// carries (a lease context's, or one set with fence.WithClaim or
// fence.WithToken). A ctx without a claim is refused with an error matching
// fence.ErrNoToken, a malformed claim with one matching fence.ErrInvalidToken,
// fence.ErrInvalidRun or fence.ErrInvalidScope; write is not called. Otherwise Do behaves exactly
// as Fence under the claim's token and run.
func (g *Guard) Do(ctx context.Context, resource string, write func(ctx context.Context) error) error {
	c, err := g.args.Context(ctx, resource)
	if err != nil {
		return err
	}
	return g.fence(ctx, resource, c, write)
}

// Fence implements fence.Guard. The write presents fence.ClaimFor(ctx,
// token): token, with ctx's run identity when ctx's claim is for the same
// token. Fence validates resource and claim (a nil ctx or write: an error
// matching fence.ErrNilArgument), waits for the resource's lock (bounded
// by ctx), and while holding it applies fence.DecideClaim, runs write with
// a ctx that carries the admitted claim (fence.ClaimFromContext), and
// stores fence.NextMark if write returns nil. memguard holds no values:
// fence.Stage in write returns fence.ErrNoStager. The error of write is
// returned as is. Once ctx has ended, Fence returns
// fence.ContextError(ctx) (matching ctx.Err() and its cause) without
// calling write.
func (g *Guard) Fence(ctx context.Context, resource string, token fence.Token, write func(ctx context.Context) error) error {
	c, err := g.args.Token(ctx, resource, token)
	if err != nil {
		return err
	}
	return g.fence(ctx, resource, c, write)
}

func (g *Guard) fence(ctx context.Context, resource string, c fence.Claim, write func(ctx context.Context) error) (err error) {
	if write == nil {
		return g.args.NilArgument(resource, "Fence with nil write")
	}
	ctx, span := g.met.Start(ctx, resource, c)
	defer func() { span.End(err) }()
	e := g.entry(resource)
	select {
	case e.lock <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("memguard: waiting for %q: %w", resource, fence.ContextError(ctx))
	}
	defer func() { <-e.lock }()
	if err := fence.ContextError(ctx); err != nil {
		return fmt.Errorf("memguard: %q: %w", resource, err)
	}
	e.mu.Lock()
	mark, markRun := e.mark, e.run
	e.mu.Unlock()
	if err := fence.DecideClaim(resource, c, mark, markRun); err != nil {
		g.met.Decision(ctx, err) // counts the refusal; logs a reuse
		return err
	}
	if err := write(engine.WithoutStager(fence.WithClaim(ctx, c))); err != nil {
		return err
	}
	tok, run := fence.NextMark(c, mark, markRun)
	e.mu.Lock()
	e.mark, e.run = tok, run
	e.mu.Unlock()
	g.met.Accepted(ctx)
	return nil
}

// Mark returns the claim of resource's high-water mark: the highest token a
// write to it has succeeded with and the run identity stored with it, or
// the zero Claim when none has. It does not wait for a Fence call in
// progress: a write still running is not counted. An invalid resource is
// refused with fence's resource error; an ended ctx with an error matching
// ctx.Err().
func (g *Guard) Mark(ctx context.Context, resource string) (fence.Claim, error) {
	if err := g.args.Read(ctx, resource); err != nil {
		return fence.Claim{}, fmt.Errorf("memguard: %q: %w", resource, err)
	}
	g.mu.Lock()
	e := g.entries[resource]
	g.mu.Unlock()
	if e == nil {
		return fence.Claim{}, nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return fence.Claim{Token: e.mark, Run: e.run}, nil
}
