package redisguard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardtest"
	"github.com/fencekit/fencekit/internal/netproxy"
)

// delayed is a Guard whose client holds ONE request in transit: its first
// connection goes through a fault proxy whose requests are paused by
// hold, and every later connection (go-redis's own retries, the guard's
// settling script) dials the server directly. The client keeps go-redis's
// default retries (MaxRetries 3) with a short read timeout, so the held
// request is re-sent by go-redis on a new connection and applied; deliver
// then sends the held copy on. Each delayed has its own proxy and client:
// several may run at once.
type delayed struct {
	g      *Guard
	client *redis.Client
	p      *netproxy.Proxy
	name   string // CLIENT SETNAME of the held connection
	once   sync.Once
	caught atomic.Bool // the proxy held a request
}

// newDelayed returns a delayed over the space's keys, with cfg's settings
// (Client and MarkPrefix are set here).
func newDelayed(ctx context.Context, s space, cfg Config) (*delayed, error) {
	p, err := netproxy.New(redisAddr())
	if err != nil {
		return nil, err
	}
	var dials atomic.Int32
	d := &delayed{p: p}
	p.OnHold(func(netproxy.Direction) { d.caught.Store(true) })
	var b [6]byte
	_, _ = rand.Read(b[:])
	d.name = "fktest-held-" + hex.EncodeToString(b[:])
	d.client = redis.NewClient(&redis.Options{
		Addr:         redisAddr(),
		PoolSize:     1,
		ReadTimeout:  300 * time.Millisecond,
		WriteTimeout: 300 * time.Millisecond,
		// MaxRetries left at go-redis's default (3 retries).
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var dl net.Dialer
			if dials.Add(1) == 1 {
				return dl.DialContext(ctx, network, p.Addr())
			}
			return dl.DialContext(ctx, network, addr)
		},
	})
	fail := func(err error) (*delayed, error) {
		d.close()
		return nil, err
	}
	// The first connection: opened, named and the script cached while the
	// proxy forwards, so that the held request is the write script itself.
	if err := d.client.Do(ctx, "CLIENT", "SETNAME", d.name).Err(); err != nil {
		return fail(err)
	}
	if err := writeScript.Load(ctx, d.client).Err(); err != nil {
		return fail(err)
	}
	cfg.Client = d.client
	cfg.MarkPrefix = s.marks
	cfg.AllowEviction = true // checked by the space's other guards
	if d.g, err = New(context.Background(), cfg); err != nil {
		return fail(err)
	}
	return d, nil
}

// hold pauses the first connection's requests: the next request the guard
// sends on it stays in the proxy until deliver.
func (d *delayed) hold() { d.p.Pause(netproxy.Upstream) }

// deliver sends the held request on and returns once the server has run
// it: the held connection, which the client closed when it gave up, is
// gone from CLIENT LIST (the server runs what it has received before it
// reads the end of the connection).
func (d *delayed) deliver(ctx context.Context) error {
	defer d.close()
	d.p.Restore()
	if !d.caught.Load() {
		return fmt.Errorf("the write sent no script: %w", guardtest.ErrNothingHeld)
	}
	c := redis.NewClient(&redis.Options{Addr: redisAddr(), PoolSize: 1})
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		list, err := c.ClientList(ctx).Result()
		if err != nil {
			return fmt.Errorf("waiting for the held request to be run: %w", err)
		}
		if !strings.Contains(list, " name="+d.name+" ") {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the held connection %s is still open", d.name)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (d *delayed) close() {
	d.once.Do(func() {
		_ = d.client.Close()
		_ = d.p.Close()
	})
}

// TestDelayedDuplicateOfOwnWrite: a write whose request is held in transit
// past the client's read timeout is re-sent by go-redis on a new
// connection and applied (Put returns nil); a later write of the same run
// is applied; then the held first copy arrives. It must not be applied:
// the value stays the later write's. The later write comes from the same
// Guard, and from another Guard instance (another process, say).
func TestDelayedDuplicateOfOwnWrite(t *testing.T) {
	ctx := context.Background()
	s := newSpace(t)
	other := s.guard(t, Config{})
	claim := fence.Claim{Token: 5, Run: "run-a"}
	for _, tc := range []struct {
		name  string
		later func(d *delayed) *Guard
	}{
		{"same guard", func(d *delayed) *Guard { return d.g }},
		{"other guard", func(*delayed) *Guard { return other }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.resources + "delayed/" + strings.ReplaceAll(tc.name, " ", "-")
			if err := other.Put(fence.WithClaim(ctx, claim), r, []byte("base")); err != nil {
				t.Fatal(err)
			}
			d, err := newDelayed(ctx, s, Config{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(d.close)
			d.hold()
			if err := d.g.Put(fence.WithClaim(fence.WithClaim(ctx, claim), claim), r, []byte("v1")); err != nil {
				t.Fatalf("Put(v1), its first request held and re-sent by go-redis: %v", err)
			}
			if v, _ := mustGet(t, other, r); v != "v1" {
				t.Fatalf("after Put(v1) returned nil the value is %q", v)
			}
			if err := tc.later(d).Put(fence.WithClaim(ctx, claim), r, []byte("v2")); err != nil {
				t.Fatalf("Put(v2): %v", err)
			}
			_, info := mustGet(t, other, r)
			if err := d.deliver(ctx); err != nil {
				t.Fatal(err)
			}
			if v, info2 := mustGet(t, other, r); v != "v2" || info2 != info {
				t.Fatalf("after the held copy of Put(v1) arrived: %q %+v, want v2 %+v: a delayed duplicate of an earlier write was applied after a later one", v, info2, info)
			}
		})
	}
}

// duplicateSubject adds guardtest.DuplicateWriter to a kit subject: every
// WriteDelayed call has its own proxy and client (safe for concurrent use
// on different resources). fence selects the Fence path instead of
// PutClaim.
type duplicateSubject struct {
	t     *testing.T
	s     space
	cfg   Config
	fence bool
}

var _ guardtest.DuplicateWriter = duplicateSubject{}

func (a duplicateSubject) WriteDelayed(ctx context.Context, r string, c fence.Claim, v string) (func(context.Context) error, error) {
	d, err := newDelayed(ctx, a.s, a.cfg)
	if err != nil {
		return nil, err
	}
	a.t.Cleanup(d.close)
	if !a.fence {
		d.hold() // PutClaim's only request is the script
		return d.deliver, d.g.Put(fence.WithClaim(ctx, c), r, []byte(v))
	}
	werr := d.g.Fence(fence.WithClaim(ctx, c), r, c.Token, func(ctx context.Context) error {
		d.hold() // after Fence read the mark: the next request is the script
		return fence.Stage(ctx, []byte(v))
	})
	return d.deliver, werr
}

// TestFaultWritersConcurrent runs the kit's delayed-duplicate and
// outcome-unknown checks from several goroutines at once on one Subject
// (different resources): its DuplicateWriter and OutcomeWriter each make
// a proxy and client per call.
func TestFaultWritersConcurrent(t *testing.T) {
	s := newSpace(t)
	sub := kitSubject{subject{s.guard(t, Config{})}, s.guard(t, Config{Strict: true}), newReplyHold(t, s), duplicateSubject{t, s, Config{}, false}}
	cfg, err := guardtest.Config{Prefix: s.resources}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if err := guardtest.CheckFaultWritersConcurrent(context.Background(), sub, cfg); err != nil {
		t.Error(err)
	}
}
