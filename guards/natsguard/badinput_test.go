package natsguard

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/obs/obstest"
)

// TestForeignEntries: a latest record the guard did not write (a plain
// KV Put, a malformed token or run, a tombstone with content) refuses
// every write with an *fence.ForeignError, and nothing is written.
func TestForeignEntries(t *testing.T) {
	ctx := context.Background()
	bucket := newBucket(t, jetstreamKV(0))
	g := guard(t, bucket, Config{})
	for i, hdr := range []nats.Header{
		nil,
		{HeaderToken: {"abc"}},
		{HeaderToken: {"07"}},
		{HeaderToken: {"0"}},
		{HeaderToken: {"9223372036854775808"}},
		{HeaderToken: {"5", "6"}},
		{HeaderToken: {"5"}, HeaderRun: {"bad run"}},
		{HeaderToken: {"5"}, HeaderDeleted: {"yes"}},
		{HeaderToken: {"5"}, HeaderDeleted: {"true"}},
	} {
		r := "foreign/" + string(rune('a'+i))
		m := nats.NewMsg(g.prefix + Key(r))
		m.Header = hdr
		m.Data = []byte("foreign")
		if _, err := g.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
		for _, tok := range []fence.Token{1, 5, 1 << 62} {
			err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: tok}), r, []byte("new"))
			var ee *fence.ForeignError
			if !errors.As(err, &ee) || ee.Resource != r || errors.Is(err, fence.ErrStale) || errors.Is(err, fence.ErrBusy) {
				t.Errorf("%v: token %d: %v, want *fence.ForeignError", hdr, tok, err)
			}
		}
		if err := g.Do(fence.WithToken(ctx, 9), r, func(context.Context) error {
			t.Errorf("%v: Fence ran its write over a foreign entry", hdr)
			return nil
		}); !errors.Is(err, fence.ErrForeign) {
			t.Errorf("%v: Do: %v", hdr, err)
		}
		if rev := lastRevision(t, g, r); rev != uint64(i+1) {
			t.Errorf("%v: latest revision %d after refused writes, want %d (nothing written)", hdr, rev, i+1)
		}
		if _, _, err := g.Get(ctx, r); !errors.Is(err, fence.ErrForeign) {
			t.Errorf("%v: Get: %v", hdr, err)
		}
	}
}

func lastRevision(t *testing.T, g *Guard, r string) uint64 {
	t.Helper()
	m, err := g.stream.GetLastMsgForSubject(context.Background(), g.prefix+Key(r))
	if err != nil {
		t.Fatal(err)
	}
	return m.Sequence
}

// TestMarkersAreTombstones: a KV Delete or Purge by another client leaves
// a marker. With history kept, the mark under a Delete marker is found in
// the history and still refuses older tokens; a Purge removes the history
// and with it the mark (documented).
func TestMarkersAreTombstones(t *testing.T) {
	ctx := context.Background()
	bucket := newBucket(t, jetstreamKV(4))
	g := guard(t, bucket, Config{})
	if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 7, Run: "run-a"}), "m/del", []byte("seven")); err != nil {
		t.Fatal(err)
	}
	if err := g.kv.Delete(ctx, Key("m/del")); err != nil {
		t.Fatal(err)
	}
	var nf *fence.NotFoundError
	if _, _, err := g.Get(ctx, "m/del"); !errors.As(err, &nf) || !nf.Deleted || nf.Token != 7 {
		t.Fatalf("Get over a delete marker: %v", err)
	}
	if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 6}), "m/del", []byte("six")); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("older token over a delete marker: %v, want stale", err)
	}
	if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 7, Run: "run-b"}), "m/del", []byte("b")); !errors.Is(err, fence.ErrTokenReused) {
		t.Fatalf("reused token over a delete marker: %v", err)
	}
	if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 8}), "m/del", []byte("eight")); err != nil {
		t.Fatalf("newer token over a delete marker: %v", err)
	}
	if b, info, err := g.Get(ctx, "m/del"); err != nil || string(b) != "eight" || info.Token != 8 {
		t.Fatalf("after writing over the marker: %q %+v %v", b, info, err)
	}
	// The guard's own delete keeps the mark in the record itself.
	if err := g.Delete(fence.WithClaim(ctx, fence.Claim{Token: 9}), "m/del"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := g.Get(ctx, "m/del"); !errors.As(err, &nf) || !nf.Deleted || nf.Token != 9 {
		t.Fatalf("Get after a fenced delete: %v", err)
	}
	if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 8}), "m/del", []byte("x")); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("older token after a fenced delete: %v", err)
	}
	// Purge erases the history: the mark is gone.
	if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 7}), "m/purge", []byte("seven")); err != nil {
		t.Fatal(err)
	}
	if err := g.kv.Purge(ctx, Key("m/purge")); err != nil {
		t.Fatal(err)
	}
	if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 3}), "m/purge", []byte("three")); err != nil {
		t.Fatalf("after a purge the mark is gone, token 3 should be admitted (documented hazard): %v", err)
	}
}

// TestBucketChecks: New refuses buckets that may drop marks unless
// AllowExpiry is set, and bad configs.
func TestBucketChecks(t *testing.T) {
	ttl := newBucket(t, jetstream.KeyValueConfig{TTL: time.Hour})
	js := connect(t, natsURL(), nil)
	if _, err := New(context.Background(), Config{Client: js, Bucket: ttl}); !errors.Is(err, ErrBucket) {
		t.Errorf("bucket with a TTL: %v, want ErrBucket", err)
	}
	if _, err := New(context.Background(), Config{Client: js, Bucket: ttl, AllowExpiry: true}); err != nil {
		t.Errorf("bucket with a TTL, AllowExpiry: %v", err)
	}
	short := newBucket(t, jetstream.KeyValueConfig{TTL: 10 * time.Second})
	if _, err := New(context.Background(), Config{Client: js, Bucket: short, AllowExpiry: true}); !errors.Is(err, ErrBucket) {
		t.Errorf("10 s duplicate window: %v, want ErrBucket", err)
	}
	if _, err := New(context.Background(), Config{Client: js, Bucket: "fktest_no_such_bucket"}); err == nil {
		t.Error("missing bucket accepted")
	}
	for _, cfg := range []Config{{Bucket: "b"}, {Client: js}, {Client: js, Bucket: "b", MaxAttempts: -1}, {Client: js, Bucket: "b", SettleTimeout: -1}} {
		if _, err := New(context.Background(), cfg); !errors.Is(err, fence.ErrInvalidConfig) {
			t.Errorf("New(%+v): %v", cfg, err)
		}
	}
}

// TestKeys: every valid resource maps to a valid, distinct key, which a
// plain KV client can read.
func TestKeys(t *testing.T) {
	ctx := context.Background()
	bucket := newBucket(t, jetstreamKV(0))
	g := guard(t, bucket, Config{})
	seen := map[string]string{}
	for i, r := range []string{"a.b", "a=2Eb", "a/b", "a b", "ü", ".", "..", "x.", "=", "%2E", strings.Repeat("é", 256)} {
		k := Key(r)
		if prev, dup := seen[k]; dup {
			t.Errorf("%q and %q share key %q", prev, r, k)
		}
		seen[k] = r
		if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: fence.Token(i + 1)}), r, []byte(r)); err != nil {
			t.Errorf("PutClaim(%q): %v", r, err)
			continue
		}
		if e, err := g.kv.Get(ctx, k); err != nil || string(e.Value()) != r {
			t.Errorf("kv.Get(%q): %v", k, err)
		}
	}
	for _, r := range []string{"", "a\x00b", "tab\t", "\xff", strings.Repeat("x", fence.MaxResourceLen+1)} {
		if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 1}), r, []byte("v")); !errors.Is(err, fence.ErrInvalidResource) {
			t.Errorf("PutClaim(%q): %v", r, err)
		}
	}
}

// TestMetricsAndReuseLog: decisions are recorded with guard="nats".
func TestMetricsAndReuseLog(t *testing.T) {
	ctx := context.Background()
	bucket := newBucket(t, jetstreamKV(0))
	m := obstest.NewMeter(t)
	logs, logger := obstest.NewLogs()
	g := guard(t, bucket, Config{MeterProvider: m.Provider, Logger: logger})
	for _, c := range []fence.Claim{{Token: 5, Run: "run-a"}, {Token: 5, Run: "run-a"}, {Token: 3}, {Token: 5, Run: "run-b"}} {
		_ = g.Put(fence.WithClaim(ctx, c), "metrics", []byte("v"))
	}
	pts := m.Collect()
	attr := map[string]string{"guard": "nats"}
	for name, want := range map[string]float64{"fencekit.guard.accepted": 2, "fencekit.guard.stale": 1, "fencekit.guard.reused": 1} {
		if got := obstest.Value(pts, name, attr); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if recs := logs.AtLeast(slog.LevelError); len(recs) != 1 || recs[0].Message != "natsguard: "+"token reused by a different run; write refused" {
		t.Errorf("reuse log: %+v", recs)
	}
}

// TestNewNilContext: New refuses a nil ctx with fence.ErrNilArgument
// before it looks at the Config or sends anything.
func TestNewNilContext(t *testing.T) {
	var nilCtx context.Context
	g, err := New(nilCtx, Config{})
	if !errors.Is(err, fence.ErrNilArgument) || g != nil {
		t.Fatalf("New(nil, Config{}) = %v, %v; want nil, fence.ErrNilArgument", g, err)
	}
}
