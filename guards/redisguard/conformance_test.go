package redisguard

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardtest"
)

// subject adapts a Guard to the conformance kit: the value is the value
// key's string, the token the mark's.
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

// badResources are names only this guard refuses: the mark prefix, and
// '}' outside a hash tag.
func badResources(s space) []string {
	return []string{s.marks + "x", "a}b", "}", "{}x}", "x{"[:1] + "}"}
}

func TestConformance(t *testing.T) {
	s := newSpace(t)
	guardtest.Run(t, guardtest.Config{
		// Every check gets a Guard on its own client (own connections).
		New: func(t *testing.T) guardtest.Subject {
			return kitSubject{subject{s.guard(t, Config{})}, s.guard(t, Config{Strict: true}), newReplyHold(t, s), duplicateSubject{t, s, Config{}, false}}
		},
		Prefix:       s.resources,
		BadResources: badResources(s),
	})
}

// TestConformanceTTL runs the kit with values that expire (after an hour:
// the SET ... PX path); marks never do.
func TestConformanceTTL(t *testing.T) {
	s := newSpace(t)
	guardtest.Run(t, guardtest.Config{
		New: func(t *testing.T) guardtest.Subject {
			return kitSubject{subject{s.guard(t, Config{TTL: 3600e9})}, s.guard(t, Config{TTL: 3600e9, Strict: true}), newReplyHold(t, s), duplicateSubject{t, s, Config{TTL: 3600e9}, false}}
		},
		Prefix: s.resources + "{ttl}/",
		Rounds: 10,
	})
}

// spread is a Subject whose calls go round-robin to independent Guards,
// each on its own client (own connection pool).
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

// TestConcurrentIndependentClients runs the kit's history check with 8
// writers whose calls are spread over 8 independent clients.
func TestConcurrentIndependentClients(t *testing.T) {
	s := newSpace(t)
	sp := &spread{}
	for range 8 {
		sp.subs = append(sp.subs, subject{s.guard(t, Config{})})
	}
	cfg, err := guardtest.Config{Writers: 8, Rounds: 40, Prefix: s.resources, Logf: t.Logf}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if err := guardtest.CheckConcurrent(context.Background(), sp, cfg); err != nil {
		t.Fatal(err)
	}
}

func (a subject) WriteFailing(ctx context.Context, r string, tok fence.Token) error {
	return a.g.Fence(ctx, r, tok, func(ctx context.Context) error {
		if err := fence.Stage(ctx, []byte("never")); err != nil {
			return err
		}
		return guardtest.ErrInjected
	})
}

// fenceSubject drives the kit through Fence and Do with Stage: the path of
// code written against fence.Guard.
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
	s := newSpace(t)
	guardtest.Run(t, guardtest.Config{
		New: func(t *testing.T) guardtest.Subject {
			return fenceKitSubject{fenceSubject{subject{s.guard(t, Config{})}}, s.guard(t, Config{Strict: true}), newReplyHold(t, s), duplicateSubject{t, s, Config{}, true}}
		},
		Prefix:       s.resources,
		BadResources: badResources(s),
		Rounds:       10,
	})
}
