package guardobs_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/metric"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardobs"
	"github.com/fencekit/fencekit/guards/guardtest"
)

// kvGuard is a guard for a toy key-value store (a map under a mutex,
// standing in for a store with a compare-and-set): the smallest complete
// guard, written as docs/guards.md's "Writing your own guard" describes.
type kvGuard struct {
	mu   sync.Mutex
	data map[string]entry
	rec  *guardobs.Recorder
}

type entry struct {
	value []byte
	token fence.Token
	run   string
}

func newKVGuard(mp metric.MeterProvider, logger *slog.Logger) (*kvGuard, error) {
	rec, err := guardobs.New(guardobs.Config{Kind: "kv", Name: "kvguard", MeterProvider: mp, Logger: logger})
	if err != nil {
		return nil, err
	}
	return &kvGuard{data: map[string]entry{}, rec: rec}, nil
}

// Put is the ctx-first form: the claim comes from ctx.
func (g *kvGuard) Put(ctx context.Context, resource string, value []byte) error {
	c, err := fence.ClaimFromContext(ctx)
	if err != nil {
		return err
	}
	return g.PutClaim(ctx, resource, c, value)
}

// PutClaim validates before any I/O, decides and writes in one atomic step,
// and records the outcome.
func (g *kvGuard) PutClaim(ctx context.Context, resource string, c fence.Claim, value []byte) error {
	return g.putClaim(ctx, resource, c, value, false)
}

// putClaim is PutClaim; strict also refuses a resource outside the claim's
// scope (fence.CheckScope), as a guard's Config.Strict would.
func (g *kvGuard) putClaim(ctx context.Context, resource string, c fence.Claim, value []byte, strict bool) error {
	if err := fence.ValidateResource(resource); err != nil {
		return err
	}
	if err := c.Validate(); err != nil {
		return err
	}
	if strict {
		if err := fence.CheckScope(resource, c); err != nil {
			return err
		}
	}
	if err := fence.ContextError(ctx); err != nil {
		return err
	}
	ctx, span := g.rec.Start(ctx, resource, c) // a span only with Config.TracerProvider
	err := g.compareAndSet(resource, c, func([]byte) ([]byte, error) { return value, nil })
	g.rec.Decision(ctx, err) // accepted, stale (with its gap) or reused (logged)
	span.End(err)            // outcome: accepted, stale, reused, …
	return err
}

// compareAndSet is the store's atomic step: decide on the mark and write
// the value update computes, together; the mark rises only if update
// succeeds.
func (g *kvGuard) compareAndSet(resource string, c fence.Claim, update func(old []byte) ([]byte, error)) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	mark := g.data[resource]
	if err := fence.DecideClaim(resource, c, mark.token, mark.run); err != nil {
		return err
	}
	value, err := update(mark.value)
	if err != nil {
		return err
	}
	tok, run := fence.NextMark(c, mark.token, mark.run)
	g.data[resource] = entry{value: value, token: tok, run: run}
	return nil
}

// Mark returns the resource's mark.
func (g *kvGuard) Mark(_ context.Context, resource string) (fence.Claim, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.data[resource]
	return fence.Claim{Token: e.token, Run: e.run}, nil
}

// A guard written outside fencekit reports like fencekit's own: the same
// instruments (guard="kv") and the same reuse record.
func Example_writeYourOwnGuard() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	g, err := newKVGuard(nil, logger)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	runA := fence.WithClaim(ctx, fence.Claim{Token: 7, Run: "run-a"})
	runB := fence.WithClaim(ctx, fence.Claim{Token: 7, Run: "run-b"})
	fmt.Println(g.Put(runA, "jobs/1", []byte("a")))
	fmt.Println(errors.Is(g.Put(runB, "jobs/1", []byte("b")), fence.ErrTokenReused))
	// Output:
	// <nil>
	// level=ERROR msg="kvguard: token reused by a different run; write refused" resource=jobs/1 token=7 run=run-b mark_run=run-a
	// true
}

type kvSubject struct{ g *kvGuard }

func (s kvSubject) Write(ctx context.Context, r string, tok fence.Token, v string) error {
	return s.g.PutClaim(ctx, r, fence.Claim{Token: tok}, []byte(v))
}

func (s kvSubject) WriteClaim(ctx context.Context, r string, c fence.Claim, v string) error {
	return s.g.PutClaim(ctx, r, c, []byte(v))
}

func (s kvSubject) WriteStrict(ctx context.Context, r string, c fence.Claim, v string) error {
	return s.g.putClaim(ctx, r, c, []byte(v), true)
}

func (s kvSubject) WriteContext(ctx context.Context, r, v string) error {
	return s.g.Put(ctx, r, []byte(v))
}

func (s kvSubject) WriteFailing(_ context.Context, r string, tok fence.Token) error {
	return s.g.compareAndSet(r, fence.Claim{Token: tok}, func([]byte) ([]byte, error) { return nil, guardtest.ErrInjected })
}

func (s kvSubject) Read(_ context.Context, r string) (string, fence.Token, bool, error) {
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	e, ok := s.g.data[r]
	return string(e.value), e.token, ok, nil
}

// TestWriteYourOwnGuardConforms: the example guard passes the conformance
// kit.
func TestWriteYourOwnGuardConforms(t *testing.T) {
	g, err := newKVGuard(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	guardtest.Run(t, guardtest.Config{New: func(*testing.T) guardtest.Subject { return kvSubject{g} }})
}
