//go:build unix

package fileguard

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardtest"
)

type subject struct{ g *Guard }

func (a subject) Write(ctx context.Context, r string, tok fence.Token, v string) error {
	return a.g.Put(fence.WithClaim(ctx, fence.Claim{Token: tok}), r, []byte(v))
}

func (a subject) WriteClaim(ctx context.Context, r string, c fence.Claim, v string) error {
	return a.g.Put(fence.WithClaim(ctx, c), r, []byte(v))
}

func (a subject) WriteContext(ctx context.Context, r, v string) error {
	return a.g.Put(ctx, r, []byte(v))
}

func (a subject) WriteFailing(ctx context.Context, r string, tok fence.Token) error {
	return a.g.Fence(ctx, r, tok, func(ctx context.Context) error {
		if err := fence.Stage(ctx, []byte("never")); err != nil {
			return err
		}
		return guardtest.ErrInjected
	})
}

// Guard is the guard the subject's writes go through (guardtest.Fencer).
func (a subject) Guard() fence.Guard { return a.g }

func (a subject) Read(ctx context.Context, r string) (string, fence.Token, bool, error) {
	b, info, err := a.g.Get(ctx, r)
	if errors.Is(err, fence.ErrNotFound) {
		return "", 0, false, nil
	}
	if err != nil {
		return "", 0, false, err
	}
	return string(b), info.Token, true, nil
}

// badResources are names only this guard refuses.
var badResources = []string{"/abs", "a//b", "a/", "./a", "a/../b", "..", ".", StateDir + "/x", StateDir, strings.Repeat("s", 256)}

func TestConformance(t *testing.T) {
	dir := t.TempDir()
	guardtest.Run(t, guardtest.Config{
		// Every check gets a Guard of its own over the same directory.
		New: func(t *testing.T) guardtest.Subject {
			return kitSubject{subject{newGuard(t, dir, Config{})}, newGuard(t, dir, Config{Strict: true})}
		},
		BadResources: badResources,
	})
}

type fenceSubject struct{ subject }

func (a fenceSubject) Write(ctx context.Context, r string, tok fence.Token, v string) error {
	return a.g.Fence(ctx, r, tok, func(ctx context.Context) error { return fence.Stage(ctx, []byte(v)) })
}

func (a fenceSubject) WriteClaim(ctx context.Context, r string, c fence.Claim, v string) error {
	return a.g.Fence(fence.WithClaim(ctx, c), r, c.Token, func(ctx context.Context) error { return fence.Stage(ctx, []byte(v)) })
}

func (a fenceSubject) WriteContext(ctx context.Context, r, v string) error {
	return a.g.Do(ctx, r, func(ctx context.Context) error { return fence.Stage(ctx, []byte(v)) })
}

func TestConformanceFence(t *testing.T) {
	dir := t.TempDir()
	guardtest.Run(t, guardtest.Config{
		New: func(t *testing.T) guardtest.Subject {
			return fenceKitSubject{fenceSubject{subject{newGuard(t, dir, Config{})}}, newGuard(t, dir, Config{Strict: true})}
		},
		BadResources: badResources,
		Rounds:       10,
	})
}

type spread struct {
	subs []subject
	n    atomic.Uint64
}

func (s *spread) next() subject { return s.subs[s.n.Add(1)%uint64(len(s.subs))] }

func (s *spread) Write(ctx context.Context, r string, tok fence.Token, v string) error {
	return s.next().Write(ctx, r, tok, v)
}

func (s *spread) Read(ctx context.Context, r string) (string, fence.Token, bool, error) {
	return s.next().Read(ctx, r)
}

// TestConcurrentIndependentGuards runs the kit's history check with 8
// writers spread over 8 Guards on one directory (each write opens its own
// lock file description, as another process would).
func TestConcurrentIndependentGuards(t *testing.T) {
	dir := t.TempDir()
	sp := &spread{}
	for range 8 {
		sp.subs = append(sp.subs, subject{newGuard(t, dir, Config{})})
	}
	cfg, err := guardtest.Config{Writers: 8, Rounds: 40, Logf: t.Logf}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if err := guardtest.CheckConcurrent(context.Background(), sp, cfg); err != nil {
		t.Fatal(err)
	}
}
