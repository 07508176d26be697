package redisguard

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardtest"
	"github.com/fencekit/fencekit/internal/netproxy"
)

var (
	_ guardtest.ClaimWriter     = kitSubject{}
	_ guardtest.ContextWriter   = kitSubject{}
	_ guardtest.FailingWriter   = kitSubject{}
	_ guardtest.StrictWriter    = kitSubject{}
	_ guardtest.OutcomeWriter   = kitSubject{}
	_ guardtest.DuplicateWriter = kitSubject{}
	_ guardtest.DuplicateWriter = fenceKitSubject{}
)

// replyHold is a Guard whose client reaches the server through a fault
// proxy (one connection, a short read timeout, no client retries, a short
// SettleTimeout), for the kit's outcome-unknown check. Each WriteHeld
// call makes its own (holds.open), so that several may run at once on
// different resources.
type replyHold struct {
	g      *Guard
	client *redis.Client
	p      *netproxy.Proxy
}

// holds makes replyHolds over a space's keys.
type holds struct{ s space }

func newReplyHold(_ *testing.T, s space) holds { return holds{s} }

// open returns a new replyHold; its close releases the proxy and client.
func (hs holds) open() (*replyHold, error) {
	p, err := netproxy.New(redisAddr())
	if err != nil {
		return nil, err
	}
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), PoolSize: 1, MaxRetries: -1,
		ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond})
	h := &replyHold{client: c, p: p}
	h.g, err = New(context.Background(), Config{Client: c, MarkPrefix: hs.s.marks, SettleTimeout: 300 * time.Millisecond, AllowEviction: true})
	if err != nil {
		h.close()
		return nil, err
	}
	return h, nil
}

func (h *replyHold) close() {
	_ = h.client.Close()
	_ = h.p.Close()
}

// run calls write, which calls hold at the point from which the server's
// replies are to be held (just before its write script is sent): the
// first reply that then reaches the proxy (the answer to the script,
// which the server has therefore run) calls applied, and no reply reaches
// the client until write returns, the settling request's included. The
// connection is opened and the script cached first, so that the held
// reply is the script's.
func (h *replyHold) run(ctx context.Context, applied func(), write func(hold func()) error) error {
	if err := h.client.Ping(ctx).Err(); err != nil {
		return err
	}
	if err := writeScript.Load(ctx, h.client).Err(); err != nil {
		return err
	}
	defer func() {
		h.p.OnHold(nil)
		h.p.Restore()
	}()
	return write(func() {
		var once sync.Once
		h.p.OnHold(func(netproxy.Direction) { once.Do(applied) })
		h.p.Pause(netproxy.Downstream)
	})
}

// kitSubject is subject (PutClaim, Put, Get) plus the kit's optional
// interfaces: WriteStrict through a guard with Config.Strict over the same
// keys, and WriteHeld through h.
type kitSubject struct {
	subject
	strict *Guard
	h      holds
	duplicateSubject
}

func (a kitSubject) WriteStrict(ctx context.Context, r string, c fence.Claim, v string) error {
	return a.strict.Put(fence.WithClaim(ctx, c), r, []byte(v))
}

func (a kitSubject) WriteHeld(ctx context.Context, r string, tok fence.Token, v string, applied func()) error {
	h, err := a.h.open()
	if err != nil {
		return err
	}
	defer h.close()
	return h.run(ctx, applied, func(hold func()) error {
		hold() // PutClaim's only request is the script
		return h.g.Put(fence.WithClaim(ctx, fence.Claim{Token: tok}), r, []byte(v))
	})
}

// fenceKitSubject is fenceSubject (Fence, Do with Stage) with the same
// optional interfaces, also through Fence.
type fenceKitSubject struct {
	fenceSubject
	strict *Guard
	h      holds
	duplicateSubject
}

func (a fenceKitSubject) WriteStrict(ctx context.Context, r string, c fence.Claim, v string) error {
	return a.strict.Fence(fence.WithClaim(ctx, c), r, c.Token, func(ctx context.Context) error { return fence.Stage(ctx, []byte(v)) })
}

func (a fenceKitSubject) WriteHeld(ctx context.Context, r string, tok fence.Token, v string, applied func()) error {
	h, err := a.h.open()
	if err != nil {
		return err
	}
	defer h.close()
	return h.run(ctx, applied, func(hold func()) error {
		return h.g.Fence(ctx, r, tok, func(ctx context.Context) error {
			hold() // after Fence read the mark: the next request is the script
			return fence.Stage(ctx, []byte(v))
		})
	})
}

// TestStrictRefusesBeforeIO: a strict guard refuses a resource outside the
// claim's scope, and a claim without a scope, with *fence.ScopeError
// without sending anything: its client is closed, so any request would
// fail with redis.ErrClosed instead.
func TestStrictRefusesBeforeIO(t *testing.T) {
	s := newSpace(t)
	g := s.guard(t, Config{Strict: true})
	if err := g.client.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	scoped := fence.Claim{Token: 3, Scope: s.resources + "acme/conv-1"}
	for _, tc := range []struct {
		r string
		c fence.Claim
	}{{s.resources + "acme/conv-2/notes", scoped}, {s.resources + "acme/conv-1/notes", fence.Claim{Token: 3}}} {
		for name, err := range map[string]error{
			"PutClaim":    g.Put(fence.WithClaim(ctx, tc.c), tc.r, []byte("x")),
			"DeleteClaim": g.Delete(fence.WithClaim(ctx, tc.c), tc.r),
			"Put":         g.Put(fence.WithClaim(ctx, tc.c), tc.r, []byte("x")),
			"Fence": g.Fence(fence.WithClaim(ctx, tc.c), tc.r, tc.c.Token, func(context.Context) error {
				t.Errorf("Fence ran its write for %q outside the claim's scope", tc.r)
				return nil
			}),
		} {
			se, ok := fence.IsOutOfScope(err)
			if !ok || *se != (fence.ScopeError{Resource: tc.r, Scope: tc.c.Scope}) {
				t.Errorf("%s(%q) under scope %q: %v, want *fence.ScopeError", name, tc.r, tc.c.Scope, err)
			}
		}
	}
}
