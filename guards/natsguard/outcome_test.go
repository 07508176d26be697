package natsguard

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardtest"
	"github.com/fencekit/fencekit/internal/netproxy"
)

var (
	_ guardtest.ClaimWriter   = kitSubject{}
	_ guardtest.ContextWriter = kitSubject{}
	_ guardtest.FailingWriter = kitSubject{}
	_ guardtest.StrictWriter  = kitSubject{}
	_ guardtest.OutcomeWriter = kitSubject{}
	_ guardtest.StrictWriter  = fenceKitSubject{}
	_ guardtest.OutcomeWriter = fenceKitSubject{}
)

// heldReply writes through a Guard of its own on bucket whose connection
// goes through a fault proxy (each request waits 300 ms for its reply,
// re-sends 300 ms each), for the kit's outcome-unknown check: the
// server's replies are held from the moment the guard publishes (after
// any read it makes to decide); the first reply that then reaches the
// proxy (the publish's acknowledgement: the server has stored the record)
// calls applied, and no reply reaches the client until write returns, the
// re-sends' included. Each call has its own proxy, connection and Guard,
// so calls may run concurrently.
func heldReply(bucket string, applied func(), write func(g *Guard) error) error {
	p, err := netproxy.New(natsURL()[len("nats://"):])
	if err != nil {
		return err
	}
	defer func() { _ = p.Close() }()
	nc, err := nats.Connect("nats://"+p.Addr(), nats.NoReconnect())
	if err != nil {
		return err
	}
	defer nc.Close()
	g, err := openGuard(nc, bucket, Config{ReplyTimeout: 300 * time.Millisecond, SettleTimeout: 300 * time.Millisecond})
	if err != nil {
		return err
	}
	var once sync.Once
	g.beforePublish = func() {
		p.OnHold(func(netproxy.Direction) { once.Do(applied) })
		p.Pause(netproxy.Downstream)
	}
	return write(g)
}

func jetstreamOf(nc *nats.Conn) (jetstream.JetStream, error) { return jetstream.New(nc) }

// kitSubject is subject (PutClaim, Put, Get) plus WriteStrict through a
// guard with Config.Strict on the same bucket, and WriteHeld and
// WriteDelayed through Guards of their own on bucket.
type kitSubject struct {
	subject
	strict *Guard
	bucket string
}

func (a kitSubject) WriteStrict(ctx context.Context, r string, c fence.Claim, v string) error {
	return a.strict.Put(fence.WithClaim(ctx, c), r, []byte(v))
}

func (a kitSubject) WriteHeld(ctx context.Context, r string, tok fence.Token, v string, applied func()) error {
	return heldReply(a.bucket, applied, func(g *Guard) error { return g.Put(fence.WithClaim(ctx, fence.Claim{Token: tok}), r, []byte(v)) })
}

// fenceKitSubject is fenceSubject (Fence, Do with Stage) with the same
// optional interfaces, also through Fence.
type fenceKitSubject struct {
	fenceSubject
	strict *Guard
	bucket string
}

func (a fenceKitSubject) WriteStrict(ctx context.Context, r string, c fence.Claim, v string) error {
	return a.strict.Fence(fence.WithClaim(ctx, c), r, c.Token, func(ctx context.Context) error { return fence.Stage(ctx, []byte(v)) })
}

func (a fenceKitSubject) WriteHeld(ctx context.Context, r string, tok fence.Token, v string, applied func()) error {
	return heldReply(a.bucket, applied, func(g *Guard) error {
		return g.Fence(ctx, r, tok, func(ctx context.Context) error { return fence.Stage(ctx, []byte(v)) })
	})
}

// TestStrictRefusesBeforeIO: a strict guard refuses a resource outside the
// claim's scope, and a claim without a scope, with *fence.ScopeError
// without publishing anything: its connection is closed, so any request
// would fail with nats.ErrConnectionClosed instead.
func TestStrictRefusesBeforeIO(t *testing.T) {
	bucket := newBucket(t, jetstreamKV(0))
	g := guard(t, bucket, Config{Strict: true})
	g.js.Conn().Close()
	ctx := context.Background()
	scoped := fence.Claim{Token: 3, Scope: "acme/conv-1"}
	for _, tc := range []struct {
		r string
		c fence.Claim
	}{{"acme/conv-2/notes", scoped}, {"acme/conv-1/notes", fence.Claim{Token: 3}}} {
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
