package natsguard

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/netproxy"
)

// proxied returns a Guard whose connection goes through a fault proxy and
// a direct Guard on the same bucket.
func proxied(t *testing.T, bucket string, cfg Config) (*Guard, *Guard, *netproxy.Proxy) {
	t.Helper()
	direct := guard(t, bucket, Config{})
	host := natsURL()[len("nats://"):]
	if _, _, err := net.SplitHostPort(host); err != nil {
		t.Fatalf("TEST_NATS_URL %q: want nats://host:port", natsURL())
	}
	p, err := netproxy.New(host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	// Each request waits 300 ms for its reply.
	if cfg.ReplyTimeout == 0 {
		cfg.ReplyTimeout = 300 * time.Millisecond
	}
	cfg.Client = connect(t, "nats://"+p.Addr(), nil, nats.NoReconnect())
	return guard(t, bucket, cfg), direct, p
}

// onFirstPublish runs f once, after the first publish of g returned.
func onFirstPublish(g *Guard, f func(err error)) *int {
	n := new(int)
	g.afterPublish = func(err error) {
		*n++
		if *n == 1 {
			f(err)
		}
	}
	return n
}

// pauseFirst pauses dir of the proxy just before g's first publish.
func pauseFirst(g *Guard, p *netproxy.Proxy, dir netproxy.Direction) {
	n := 0
	g.beforePublish = func() {
		if n++; n == 1 {
			p.Pause(dir)
		}
	}
}

// TestLostReplyStored: the record is stored, its acknowledgement lost. The
// identical re-send is answered as a duplicate of the stored copy:
// success, one record.
func TestLostReplyStored(t *testing.T) {
	bucket := newBucket(t, jetstreamKV(0))
	g, direct, p := proxied(t, bucket, Config{})
	ctx := context.Background()
	if err := direct.Put(fence.WithClaim(ctx, fence.Claim{Token: 3}), "lost/stored", []byte("three")); err != nil {
		t.Fatal(err)
	}
	pauseFirst(g, p, netproxy.Downstream)
	var first error
	n := onFirstPublish(g, func(err error) { first = err; p.Restore() })
	if err := g.Put(fence.WithClaim(context.Background(), fence.Claim{Token: 4}), "lost/stored", []byte("four")); err != nil {
		t.Fatalf("stored write whose reply was lost: %v", err)
	}
	if first == nil || *n != 2 {
		t.Fatalf("first publish %v, %d publishes: want a lost reply and one re-send", first, *n)
	}
	b, info, err := direct.Get(ctx, "lost/stored")
	if err != nil || string(b) != "four" || info.Token != 4 || info.Revision != 2 {
		t.Fatalf("stored %q %+v %v, want four at revision 2", b, info, err)
	}
}

// TestLostRequestOvertaken: the request is held on the way; meanwhile a
// higher token writes. The held request, delivered later, and the re-send
// both meet a newer revision: the write is reported stale, with Overtaken
// set since its request left and its reply was lost, and the value is the
// higher token's.
func TestLostRequestOvertaken(t *testing.T) {
	bucket := newBucket(t, jetstreamKV(0))
	g, direct, p := proxied(t, bucket, Config{})
	ctx := context.Background()
	pauseFirst(g, p, netproxy.Upstream)
	onFirstPublish(g, func(error) {
		if err := direct.Put(fence.WithClaim(ctx, fence.Claim{Token: 9}), "lost/overtaken", []byte("nine")); err != nil {
			t.Error(err)
		}
		p.Restore()
	})
	err := g.Put(fence.WithClaim(context.Background(), fence.Claim{Token: 8}), "lost/overtaken", []byte("eight"))
	se, ok := fence.IsStale(err)
	if !ok || se.Presented != 8 || se.Highest != 9 || !se.Overtaken {
		t.Fatalf("overtaken write: %v, want StaleError{8, 9} with Overtaken set (its reply was lost)", err)
	}
	if b, info, err := direct.Get(ctx, "lost/overtaken"); err != nil || string(b) != "nine" || info.Token != 9 {
		t.Fatalf("stored %q %+v %v", b, info, err)
	}
}

// TestLostReplyUnsettled: no reply, and the re-sends get none either: the
// error matches fence.ErrOutcomeUnknown. Once the network heals the record is
// found stored.
func TestLostReplyUnsettled(t *testing.T) {
	bucket := newBucket(t, jetstreamKV(0))
	g, direct, p := proxied(t, bucket, Config{SettleTimeout: 300 * time.Millisecond})
	g.beforePublish = func() { p.Pause(netproxy.Downstream) }
	err := g.Put(fence.WithClaim(context.Background(), fence.Claim{Token: 2}), "lost/unsettled", []byte("two"))
	p.Restore()
	if !errors.Is(err, fence.ErrOutcomeUnknown) || errors.Is(err, fence.ErrBusy) || errors.Is(err, fence.ErrStale) {
		t.Fatalf("unsettled write: %v, want fence.ErrOutcomeUnknown only", err)
	}
	if oe, ok := fence.IsOutcomeUnknown(err); !ok || oe.Op != "natsguard: publish" {
		t.Fatalf("unsettled write: %#v, want *fence.OutcomeUnknownError of natsguard: publish", err)
	}
	if b, info, err := direct.Get(context.Background(), "lost/unsettled"); err != nil || string(b) != "two" || info.Token != 2 {
		t.Fatalf("stored %q %+v %v", b, info, err)
	}
}

// TestLostReplyBoundedByDefault: a publish whose reply is lost waits
// DefaultReplyTimeout (5 s), not the call's whole deadline, before the
// guard settles it; the re-sends get no reply either, and the call returns
// an unknown outcome long before its 30 s deadline.
func TestLostReplyBoundedByDefault(t *testing.T) {
	bucket := newBucket(t, jetstreamKV(0))
	g, _, p, _ := viaProxy(t, bucket, Config{SettleTimeout: 300 * time.Millisecond}, nats.NoReconnect())
	g.beforePublish = func() { p.Pause(netproxy.Downstream) }
	defer p.Restore()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 2}), "lost/bounded", []byte("two"))
	took := time.Since(start)
	if !errors.Is(err, fence.ErrOutcomeUnknown) || errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		t.Fatalf("write whose replies were all lost: %v, want fence.ErrOutcomeUnknown before the call's deadline", err)
	}
	// 5 s for the first reply, 2 × 300 ms for the re-sends, and slack for
	// a loaded machine.
	if took > 12*time.Second {
		t.Fatalf("write whose reply was lost returned after %v: bounded by the call's deadline, not by the reply timeout", took)
	}
}

// TestLostReplyStoredThenOvertaken: the record is stored, its reply lost,
// and a newer token writes before the re-send. The re-send is answered as
// a duplicate of the stored copy: success (it was applied, then
// overtaken), and the newer value stays.
func TestLostReplyStoredThenOvertaken(t *testing.T) {
	bucket := newBucket(t, jetstreamKV(0))
	g, direct, p := proxied(t, bucket, Config{})
	ctx := context.Background()
	pauseFirst(g, p, netproxy.Downstream)
	var stored sync.WaitGroup
	stored.Add(1)
	var once sync.Once
	p.OnHold(func(netproxy.Direction) { once.Do(stored.Done) })
	onFirstPublish(g, func(error) {
		stored.Wait()
		if err := direct.Put(fence.WithClaim(ctx, fence.Claim{Token: 9}), "lost/stored-overtaken", []byte("nine")); err != nil {
			t.Error(err)
		}
		p.Restore()
	})
	if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 8}), "lost/stored-overtaken", []byte("eight")); err != nil {
		t.Fatalf("write stored, then overtaken before its re-send: %v, want nil (it was applied)", err)
	}
	if b, info, err := direct.Get(ctx, "lost/stored-overtaken"); err != nil || string(b) != "nine" || info.Token != 9 || info.Revision != 2 {
		t.Fatalf("stored %q %+v %v, want nine at revision 2", b, info, err)
	}
}
