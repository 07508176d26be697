package natsguard

import (
	"context"
	"errors"
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

func TestConformance(t *testing.T) {
	bucket := newBucket(t, jetstreamKV(0))
	guardtest.Run(t, guardtest.Config{
		// Every check gets a Guard on its own connection.
		New: func(t *testing.T) guardtest.Subject {
			return kitSubject{subject{guard(t, bucket, Config{MaxAttempts: 100})},
				guard(t, bucket, Config{MaxAttempts: 100, Strict: true}), bucket}
		},
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
	bucket := newBucket(t, jetstreamKV(0))
	guardtest.Run(t, guardtest.Config{
		New: func(t *testing.T) guardtest.Subject {
			return fenceKitSubject{fenceSubject{subject{guard(t, bucket, Config{MaxAttempts: 100})}},
				guard(t, bucket, Config{MaxAttempts: 100, Strict: true}), bucket}
		},
		Rounds: 10,
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

// TestConcurrentIndependentClients runs the kit's history check with 8
// writers spread over 8 independent connections.
func TestConcurrentIndependentClients(t *testing.T) {
	bucket := newBucket(t, jetstreamKV(0))
	sp := &spread{}
	for range 8 {
		sp.subs = append(sp.subs, subject{guard(t, bucket, Config{MaxAttempts: 100})})
	}
	cfg, err := guardtest.Config{Writers: 8, Rounds: 40, Logf: t.Logf}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if err := guardtest.CheckConcurrent(context.Background(), sp, cfg); err != nil {
		t.Fatal(err)
	}
}

// TestCacheSeesOtherWriters: a Guard that remembers its last write to a
// key still refuses a token below a mark another Guard set since, and
// writes over a higher one correctly.
func TestCacheSeesOtherWriters(t *testing.T) {
	ctx := context.Background()
	bucket := newBucket(t, jetstreamKV(0))
	a, b := guard(t, bucket, Config{}), guard(t, bucket, Config{})
	if err := a.Put(fence.WithClaim(ctx, fence.Claim{Token: 5}), "c", []byte("a5")); err != nil {
		t.Fatal(err)
	}
	if err := b.Put(fence.WithClaim(ctx, fence.Claim{Token: 9}), "c", []byte("b9")); err != nil {
		t.Fatal(err)
	}
	// a's cache says mark 5, revision 1: token 6 passes that decision, and
	// the conditional write must fail and be decided again as stale.
	if se, ok := fence.IsStale(a.Put(fence.WithClaim(ctx, fence.Claim{Token: 6}), "c", []byte("a6"))); !ok || se.Highest != 9 {
		t.Fatalf("token 6 after another guard wrote 9: %v", se)
	}
	if err := a.Put(fence.WithClaim(ctx, fence.Claim{Token: 10}), "c", []byte("a10")); err != nil {
		t.Fatal(err)
	}
	if v, info, err := b.Get(ctx, "c"); err != nil || string(v) != "a10" || info.Token != 10 || info.Revision != 3 {
		t.Fatalf("final %q %+v %v", v, info, err)
	}
}
