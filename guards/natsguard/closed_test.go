package natsguard

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/netproxy"
)

// viaProxy returns a Guard (cfg) whose connection, made with opts, goes
// through a fault proxy, the connection, the proxy, and a direct Guard on
// the same bucket.
func viaProxy(t *testing.T, bucket string, cfg Config, opts ...nats.Option) (*Guard, *nats.Conn, *netproxy.Proxy, *Guard) {
	t.Helper()
	direct := guard(t, bucket, Config{})
	p, err := netproxy.New(natsURL()[len("nats://"):])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	cfg.Client = connect(t, "nats://"+p.Addr(), nil, opts...)
	return guard(t, bucket, cfg), cfg.Client.Conn(), p, direct
}

// holdReplyOnce holds the server's replies from g's first publish on and
// calls stored (once, from the proxy) when the first of them reaches the
// proxy: the server has stored the record, the guard waits for its reply.
func holdReplyOnce(g *Guard, p *netproxy.Proxy, stored func()) {
	var once, pub sync.Once
	g.beforePublish = func() {
		pub.Do(func() {
			p.OnHold(func(netproxy.Direction) { once.Do(stored) })
			p.Pause(netproxy.Downstream)
		})
	}
}

// TestConnectionClosedAfterSend: the publish was sent and stored, and the
// connection closes while the guard waits for its reply; nats.go then
// answers nats.ErrConnectionClosed (or the context's error) although the
// request left. The stream holds the record, so the guard must report an
// unknown outcome, never "nothing written".
func TestConnectionClosedAfterSend(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []nats.Option
		// onStored runs once the record is stored; it returns the ctx
		// the write runs under (set up before the write).
		setup func(t *testing.T, nc *nats.Conn, p *netproxy.Proxy) (ctx context.Context, onStored func())
		// ctxEnds: the write's context ends (its error must match it).
		ctxEnds bool
	}{
		{
			name: "no reconnect, cut when ctx ends",
			opts: []nats.Option{nats.NoReconnect()},
			setup: func(t *testing.T, _ *nats.Conn, p *netproxy.Proxy) (context.Context, func()) {
				ctx, cancel := context.WithCancel(context.Background())
				t.Cleanup(cancel)
				context.AfterFunc(ctx, p.Cut)
				return ctx, cancel
			},
			ctxEnds: true,
		},
		{
			name: "no reconnect, cut 300ms in",
			opts: []nats.Option{nats.NoReconnect()},
			setup: func(t *testing.T, _ *nats.Conn, p *netproxy.Proxy) (context.Context, func()) {
				return context.Background(), func() { time.AfterFunc(300*time.Millisecond, p.Cut) }
			},
		},
		{
			name: "reconnecting, application closes at ctx end",
			setup: func(t *testing.T, nc *nats.Conn, _ *netproxy.Proxy) (context.Context, func()) {
				ctx, cancel := context.WithCancel(context.Background())
				t.Cleanup(cancel)
				context.AfterFunc(ctx, nc.Close)
				return ctx, cancel
			},
			ctxEnds: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bucket := newBucket(t, jetstreamKV(0))
			g, nc, p, direct := viaProxy(t, bucket, Config{}, tc.opts...)
			if err := direct.Put(fence.WithClaim(context.Background(), fence.Claim{Token: 3}), "closed", []byte("three")); err != nil {
				t.Fatal(err)
			}
			ctx, onStored := tc.setup(t, nc, p)
			holdReplyOnce(g, p, onStored)
			err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 4}), "closed", []byte("four"))
			if !errors.Is(err, fence.ErrOutcomeUnknown) || errors.Is(err, fence.ErrBusy) || errors.Is(err, fence.ErrStale) {
				t.Fatalf("write stored, connection closed before its reply: %v, want fence.ErrOutcomeUnknown only", err)
			}
			if tc.ctxEnds && !errors.Is(err, context.Canceled) {
				t.Errorf("write whose ctx ended: %v, want it to match context.Canceled too", err)
			}
			if b, info, err := direct.Get(context.Background(), "closed"); err != nil || string(b) != "four" || info.Token != 4 {
				t.Fatalf("stream holds %q %+v %v, want four (the write landed)", b, info, err)
			}
		})
	}
}

// TestClosedBeforePublish: a connection closed before the write starts
// sends nothing: the error says so (nats.ErrConnectionClosed), and it is
// not an unknown outcome.
func TestClosedBeforePublish(t *testing.T) {
	bucket := newBucket(t, jetstreamKV(0))
	g := guard(t, bucket, Config{})
	g.js.Conn().Close()
	err := g.Put(fence.WithClaim(context.Background(), fence.Claim{Token: 1}), "closed/before", []byte("one"))
	if !errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, fence.ErrOutcomeUnknown) || errors.Is(err, fence.ErrNotApplied) {
		t.Fatalf("write on a closed connection: %v, want nats.ErrConnectionClosed (nothing sent)", err)
	}
}

// TestLostReplyNotAppliedCtxEnded: the publish is held on its way, another
// write under the same claim changes the key, and the call's context ends.
// The re-send is refused (the key moved on), which settles that the held
// copy was not and will not be stored; the guard cannot decide again with
// its context ended, so it reports *fence.NotAppliedError matching the
// context's error, not "nothing sent" and not an unknown outcome.
func TestLostReplyNotAppliedCtxEnded(t *testing.T) {
	bucket := newBucket(t, jetstreamKV(0))
	g, _, p, direct := viaProxy(t, bucket, Config{ReplyTimeout: 300 * time.Millisecond}, nats.NoReconnect())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := fence.Claim{Token: 8, Run: "run-a"}
	if err := direct.Put(fence.WithClaim(ctx, c), "na", []byte("base")); err != nil {
		t.Fatal(err)
	}
	pauseFirst(g, p, netproxy.Upstream)
	onFirstPublish(g, func(error) {
		if err := direct.Put(fence.WithClaim(context.Background(), c), "na", []byte("other")); err != nil {
			t.Error(err)
		}
		cancel()
		p.Restore()
	})
	err := g.Put(fence.WithClaim(ctx, c), "na", []byte("held"))
	if _, ok := fence.IsNotApplied(err); !ok || !errors.Is(err, context.Canceled) || errors.Is(err, fence.ErrOutcomeUnknown) {
		t.Fatalf("held write settled as not stored, ctx ended: %v, want *fence.NotAppliedError matching context.Canceled", err)
	}
	if b, info, err := direct.Get(context.Background(), "na"); err != nil || string(b) != "other" || info.Token != 8 {
		t.Fatalf("stored %q %+v %v, want other", b, info, err)
	}
}
