package redisguard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/netproxy"
)

// proxied returns a Guard whose client reaches the server through a fault
// proxy, with a short read timeout and the client's own retries off (so
// each test controls every request), and a direct Guard on the same
// space.
func proxied(t *testing.T, s space, cfg Config) (*Guard, *Guard, *netproxy.Proxy) {
	t.Helper()
	direct := s.guard(t, Config{})
	p, err := netproxy.New(redisAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	cfg.Client = newClient(t, p.Addr(), func(o *redis.Options) {
		o.ReadTimeout = 300 * time.Millisecond
		o.WriteTimeout = 300 * time.Millisecond
		o.MaxRetries = -1
		o.PoolSize = 1
		o.ClientName = proxyClientName(p)
	})
	return s.guard(t, cfg), direct, p
}

// proxyClientName is the CLIENT SETNAME of the connections proxied opens.
func proxyClientName(p *netproxy.Proxy) string {
	return fmt.Sprintf("fktest-proxied-%d", p.Port())
}

// deliverHeld restores p and waits until the server has run what p held:
// the proxied connections, which their client gave up, are gone from
// CLIENT LIST (the server runs what it received before it reads the end
// of the connection).
func deliverHeld(t *testing.T, direct *Guard, p *netproxy.Proxy) {
	t.Helper()
	p.Restore()
	waitFor(t, "the held request run", func() bool {
		list, err := direct.client.ClientList(context.Background()).Result()
		return err == nil && !strings.Contains(list, " name="+proxyClientName(p)+" ")
	})
}

// loseReply makes the next write's reply disappear: replies are paused
// before the write is sent; once the write has failed (the client gave up
// waiting), then runs, and the proxy is restored unless then says not to.
func loseReply(g *Guard, p *netproxy.Proxy, then func() (restore bool)) *atomic.Int32 {
	var n atomic.Int32
	p.Pause(netproxy.Downstream)
	g.afterWriteSent = func() {
		if n.Add(1) == 1 {
			if then == nil || then() {
				p.Restore()
			}
		}
	}
	return &n
}

func mustGet(t *testing.T, g *Guard, r string) (string, Info) {
	t.Helper()
	b, info, err := g.Get(context.Background(), r)
	if err != nil {
		t.Fatalf("Get(%q): %v", r, err)
	}
	return string(b), info
}

// TestLostReplyApplied: the write reaches the server and is applied, its
// reply is lost. Settling by write id finds it applied: success, applied
// once, no second write sent.
func TestLostReplyApplied(t *testing.T) {
	ctx := context.Background()
	s := newSpace(t)
	g, direct, p := proxied(t, s, Config{})
	r := s.resources + "applied"
	if err := direct.Put(fence.WithClaim(ctx, fence.Claim{Token: 3, Run: "run-a"}), r, []byte("three")); err != nil {
		t.Fatal(err)
	}
	n := loseReply(g, p, nil)
	if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 4, Run: "run-a"}), r, []byte("four")); err != nil {
		t.Fatalf("write whose reply was lost: %v", err)
	}
	if n.Load() != 1 {
		t.Fatalf("%d writes sent, want 1 (applied, settled as applied)", n.Load())
	}
	if v, info := mustGet(t, direct, r); v != "four" || info.Token != 4 || info.Run != "run-a" {
		t.Fatalf("stored %q %+v", v, info)
	}
}

// TestLostReplyNotApplied: the request is held on the way (the partition
// is upstream) and the client gives up. Settling finds the mark without
// this write and cancels the write id; the write is sent again and
// applied. The held request, delivered when the partition heals, is
// refused by its cancel key: the value is the second write's, applied
// once.
func TestLostReplyNotApplied(t *testing.T) {
	ctx := context.Background()
	s := newSpace(t)
	g, direct, p := proxied(t, s, Config{})
	r := s.resources + "notapplied"
	if err := direct.Put(fence.WithClaim(ctx, fence.Claim{Token: 3}), r, []byte("three")); err != nil {
		t.Fatal(err)
	}
	var held *Info
	p.Pause(netproxy.Upstream)
	var n atomic.Int32
	g.afterWriteSent = func() {
		if n.Add(1) == 1 {
			// The first request is held in the proxy. Settle on a direct
			// connection (the proxy's is still partitioned): it cancels
			// the write id before the held request is delivered.
			g.client = direct.client
			_, info, _ := direct.Get(ctx, r)
			held = &info
		}
	}
	err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 5}), r, []byte("five"))
	if err != nil {
		t.Fatalf("write re-sent after a settled lost reply: %v", err)
	}
	if n.Load() != 2 {
		t.Fatalf("%d writes sent, want 2 (lost, re-sent)", n.Load())
	}
	if held == nil || held.Token != 3 {
		t.Fatalf("before settling, mark %+v, want token 3", held)
	}
	v, info := mustGet(t, direct, r)
	if v != "five" || info.Token != 5 {
		t.Fatalf("stored %q %+v", v, info)
	}
	// Deliver the held request and wait for the server to have run it.
	accepted := p.Accepted()
	deliverHeld(t, direct, p)
	if got := p.Accepted(); got != accepted {
		t.Fatalf("proxy accepted %d connections after restore", got-accepted)
	}
	if _, info2 := mustGet(t, direct, r); info2.WriteID != info.WriteID {
		t.Fatalf("the held request was applied after it was cancelled: write id %s, want %s", info2.WriteID, info.WriteID)
	}
}

// TestLostReplyOvertaken: the reply is lost and, before the write is
// settled, a higher token writes. The write had been applied (its reply
// was lost on the way back), and its write-id record says so: it reports
// success, and the value is the higher token's.
func TestLostReplyOvertaken(t *testing.T) {
	ctx := context.Background()
	s := newSpace(t)
	g, direct, p := proxied(t, s, Config{})
	r := s.resources + "overtaken"
	loseReply(g, p, func() bool {
		if err := direct.Put(fence.WithClaim(ctx, fence.Claim{Token: 9}), r, []byte("nine")); err != nil {
			t.Error(err)
		}
		return true
	})
	if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 8}), r, []byte("eight")); err != nil {
		t.Fatalf("applied write whose reply was lost, then overtaken: %v, want nil (settled: applied)", err)
	}
	if v, info := mustGet(t, direct, r); v != "nine" || info.Token != 9 {
		t.Fatalf("stored %q %+v", v, info)
	}
}

// TestLostReplyOvertakenUnrecorded: as TestLostReplyOvertaken, but the
// settling script runs after the write's record was dropped (a window of
// 50ms, a read timeout of 300ms): the write may have been applied before
// the higher mark, so the *fence.StaleError has Overtaken set.
func TestLostReplyOvertakenUnrecorded(t *testing.T) {
	ctx := context.Background()
	s := newSpace(t)
	g, direct, p := proxied(t, s, Config{DuplicateWindow: 50 * time.Millisecond})
	r := s.resources + "overtaken"
	loseReply(g, p, func() bool {
		if err := direct.Put(fence.WithClaim(ctx, fence.Claim{Token: 9}), r, []byte("nine")); err != nil {
			t.Error(err)
		}
		return true
	})
	err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 8}), r, []byte("eight"))
	se, ok := fence.IsStale(err)
	if !ok || se.Presented != 8 || se.Highest != 9 || !se.Overtaken {
		t.Fatalf("overtaken lost reply: %#v, want StaleError{8, 9, Overtaken: true}", err)
	}
	if v, info := mustGet(t, direct, r); v != "nine" || info.Token != 9 {
		t.Fatalf("stored %q %+v", v, info)
	}
}

// TestLostRequestOvertaken: the request is held on the way (never
// applied) while a higher token writes; settling finds the higher mark
// and the record proves this write was not applied: a certain
// *fence.StaleError (Overtaken false). The held request, delivered
// afterwards, changes nothing.
func TestLostRequestOvertaken(t *testing.T) {
	ctx := context.Background()
	s := newSpace(t)
	g, direct, p := proxied(t, s, Config{})
	r := s.resources + "overtaken"
	p.Pause(netproxy.Upstream)
	var n atomic.Int32
	g.afterWriteSent = func() {
		if n.Add(1) == 1 {
			g.client = direct.client // settle past the partition
			if err := direct.Put(fence.WithClaim(ctx, fence.Claim{Token: 9}), r, []byte("nine")); err != nil {
				t.Error(err)
			}
		}
	}
	err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 8}), r, []byte("eight"))
	se, ok := fence.IsStale(err)
	if !ok || se.Presented != 8 || se.Highest != 9 || se.Overtaken {
		t.Fatalf("overtaken lost request: %#v, want StaleError{8, 9, Overtaken: false}", err)
	}
	deliverHeld(t, direct, p)
	if v, info := mustGet(t, direct, r); v != "nine" || info.Token != 9 {
		t.Fatalf("stored %q %+v", v, info)
	}
}

// TestLostReplyNotAppliedTyped: a write whose request was held on the way
// and settled as not applied, with no attempt left, returns a
// *fence.NotAppliedError (fence.ErrNotApplied), neither outcome unknown
// nor busy; nothing was written.
func TestLostReplyNotAppliedTyped(t *testing.T) {
	ctx := context.Background()
	s := newSpace(t)
	g, direct, p := proxied(t, s, Config{MaxAttempts: 1})
	r := s.resources + "notappliedtyped"
	p.Pause(netproxy.Upstream)
	g.afterWriteSent = func() { g.client = direct.client }
	err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 5}), r, []byte("five"))
	ne, ok := fence.IsNotApplied(err)
	if !ok || ne.Op != "redisguard: write" || ne.Resource != r || errors.Is(err, fence.ErrOutcomeUnknown) || errors.Is(err, fence.ErrBusy) {
		t.Fatalf("settled not applied: %#v, want *fence.NotAppliedError only", err)
	}
	deliverHeld(t, direct, p)
	if _, _, err := direct.Get(ctx, r); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("Get after a write settled as not applied: %v, want fence.ErrNotFound", err)
	}
}

// TestLostReplyUnsettled: the reply is lost and the server stays
// unreachable, so the write cannot be settled: the error matches
// fence.ErrOutcomeUnknown (a *fence.OutcomeUnknownError, neither stale nor
// busy). Once the server is
// back, the write is found applied.
func TestLostReplyUnsettled(t *testing.T) {
	ctx := context.Background()
	s := newSpace(t)
	g, direct, p := proxied(t, s, Config{SettleTimeout: 500 * time.Millisecond})
	r := s.resources + "unsettled"
	loseReply(g, p, func() bool { p.Cut(); return false })
	err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 2}), r, []byte("two"))
	p.Restore()
	if !errors.Is(err, fence.ErrOutcomeUnknown) || errors.Is(err, fence.ErrBusy) || errors.Is(err, fence.ErrStale) {
		t.Fatalf("unsettled write: %v, want fence.ErrOutcomeUnknown only", err)
	}
	if oe, ok := fence.IsOutcomeUnknown(err); !ok || oe.Op != "redisguard: write" || oe.Resource != r {
		t.Fatalf("unsettled write: %#v, want *fence.OutcomeUnknownError{Op: \"redisguard: write\", Resource: %q}", err, r)
	}
	if v, info := mustGet(t, direct, r); v != "two" || info.Token != 2 {
		t.Fatalf("stored %q %+v (the request had reached the server)", v, info)
	}
}

// TestLostReplyEndedContext: the call's context ends while the reply is
// outstanding. The outcome is still settled, on a fresh context: the write
// was applied, so it reports success.
func TestLostReplyEndedContext(t *testing.T) {
	s := newSpace(t)
	g, direct, p := proxied(t, s, Config{})
	r := s.resources + "endedctx"
	ctx, cancel := context.WithCancel(context.Background())
	loseReply(g, p, func() bool { cancel(); return true })
	if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 6}), r, []byte("six")); err != nil {
		t.Fatalf("applied write whose context ended before its reply: %v", err)
	}
	if v, info := mustGet(t, direct, r); v != "six" || info.Token != 6 {
		t.Fatalf("stored %q %+v", v, info)
	}
}

// TestRetriedScriptNotAppliedTwice: the same write id sent twice (as the
// client's own retries do) is applied once; the second is "dup".
func TestRetriedScriptNotAppliedTwice(t *testing.T) {
	ctx := context.Background()
	s := newSpace(t)
	g := s.guard(t, Config{})
	r := s.resources + "dup"
	keys := []string{r, g.markKey(r), g.idsKey(r)}
	deadline := strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10)
	for i, want := range []string{"ok", "dup"} {
		got, err := writeScript.Run(ctx, g.client, keys, "7", "run-a", "id-1", "p", "v"+want, "0", deadline, "60000").StringSlice()
		if err != nil || got[0] != want {
			t.Fatalf("send %d: %q %v, want %s", i, got, err, want)
		}
	}
	if v, _ := mustGet(t, g, r); v != "vok" {
		t.Fatalf("value %q after a repeated write id", v)
	}
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestHeldCopyAfterWindow: the guard's own settling path. The request is
// held on the way, settled as not applied (its id recorded as cancelled)
// and sent again under a new id. The held copy is delivered only after
// the cancellation record is gone (a window of 100ms): it is refused by
// its deadline, so the value stays the second write's.
func TestHeldCopyAfterWindow(t *testing.T) {
	ctx := context.Background()
	s := newSpace(t)
	g, direct, p := proxied(t, s, Config{DuplicateWindow: 100 * time.Millisecond})
	r := s.resources + "afterwindow"
	p.Pause(netproxy.Upstream)
	var n atomic.Int32
	g.afterWriteSent = func() {
		if n.Add(1) == 1 {
			g.client = direct.client
		}
	}
	if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 5}), r, []byte("five")); err != nil {
		t.Fatalf("write re-sent after a settled lost reply: %v", err)
	}
	if n.Load() != 2 {
		t.Fatalf("%d writes sent, want 2 (held, re-sent)", n.Load())
	}
	_, info := mustGet(t, direct, r)
	waitFor(t, "the write-id record to expire", func() bool {
		n, err := direct.client.Exists(ctx, g.idsKey(r)).Result()
		return err == nil && n == 0
	})
	deliverHeld(t, direct, p)
	if v, info2 := mustGet(t, direct, r); v != "five" || info2 != info {
		t.Fatalf("after the held copy arrived past its window: %q %+v, want five %+v", v, info2, info)
	}
}

// TestClockSkew: a host whose clock is far behind the server's (every
// request arrives past its deadline) or far ahead (deadlines more than two
// windows ahead) has its writes refused with a *ClockError, nothing
// written.
func TestClockSkew(t *testing.T) {
	ctx := context.Background()
	s := newSpace(t)
	for _, shift := range []time.Duration{-time.Hour, time.Hour} {
		g := s.guard(t, Config{})
		g.now = func() time.Time { return time.Now().Add(shift) }
		r := s.resources + "skew"
		err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 5}), r, []byte("x"))
		var ce *ClockError
		if !errors.As(err, &ce) || !errors.Is(err, ErrClockSkew) || (ce.Offset > 0) != (shift < 0) {
			t.Errorf("host clock shifted by %v: %v, want *ClockError with an offset of the other sign", shift, err)
		}
		if _, _, err := g.Get(ctx, r); !errors.Is(err, fence.ErrNotFound) {
			t.Errorf("host clock shifted by %v: Get: %v, want not found", shift, err)
		}
	}
}
