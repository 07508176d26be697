package redisguard

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fence"
)

// TestCorruptMark: a mark key that is not this guard's (malformed token or
// run, another type) refuses every write with a *fence.ForeignError and nothing is
// written; Get and Mark report it too.
func TestCorruptMark(t *testing.T) {
	ctx := context.Background()
	s := newSpace(t)
	g := s.guard(t, Config{})
	c := g.client
	for i, bad := range []struct {
		name string
		set  func(mark string) error
	}{
		{"token not a number", func(k string) error { return c.HSet(ctx, k, "t", "abc", "r", "", "w", "x").Err() }},
		{"token with a leading zero", func(k string) error { return c.HSet(ctx, k, "t", "07").Err() }},
		{"token zero", func(k string) error { return c.HSet(ctx, k, "t", "0").Err() }},
		{"token negative", func(k string) error { return c.HSet(ctx, k, "t", "-3").Err() }},
		{"token above MaxInt64", func(k string) error { return c.HSet(ctx, k, "t", "9223372036854775808").Err() }},
		{"token missing", func(k string) error { return c.HSet(ctx, k, "r", "run-a").Err() }},
		{"run with a space", func(k string) error { return c.HSet(ctx, k, "t", "5", "r", "run a").Err() }},
		{"run too long", func(k string) error { return c.HSet(ctx, k, "t", "5", "r", strings.Repeat("r", 65)).Err() }},
		{"mark is a string", func(k string) error { return c.Set(ctx, k, "5", 0).Err() }},
		{"mark is a list", func(k string) error { return c.RPush(ctx, k, "5").Err() }},
	} {
		r := s.resources + "corrupt/" + string(rune('a'+i))
		if err := c.Set(ctx, r, "old", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := bad.set(g.markKey(r)); err != nil {
			t.Fatal(err)
		}
		for _, tok := range []fence.Token{1, 5, 1 << 62} {
			err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: tok}), r, []byte("new"))
			var me *fence.ForeignError
			if !errors.As(err, &me) || !errors.Is(err, fence.ErrForeign) || me.Resource != r {
				t.Errorf("%s: write under token %d: %v, want *fence.ForeignError", bad.name, tok, err)
			}
			if errors.Is(err, fence.ErrStale) || errors.Is(err, fence.ErrBusy) {
				t.Errorf("%s: %v matches stale or busy", bad.name, err)
			}
		}
		if err := g.Do(fence.WithToken(ctx, 9), r, func(context.Context) error {
			t.Errorf("%s: Fence ran its write over a corrupt mark", bad.name)
			return nil
		}); !errors.Is(err, fence.ErrForeign) {
			t.Errorf("%s: Do: %v, want fence.ErrForeign", bad.name, err)
		}
		if v, err := c.Get(ctx, r).Result(); err != nil || v != "old" {
			t.Errorf("%s: value %q (%v) after refused writes, want old", bad.name, v, err)
		}
		if _, _, err := g.Get(ctx, r); !errors.Is(err, fence.ErrForeign) {
			t.Errorf("%s: Get: %v, want fence.ErrForeign", bad.name, err)
		}
		if _, err := g.Mark(ctx, r); !errors.Is(err, fence.ErrForeign) {
			t.Errorf("%s: Mark: %v, want fence.ErrForeign", bad.name, err)
		}
	}
}

// TestForeignValue: a value key that is not a string is reported by Get as
// a *fence.ForeignError naming the value key.
func TestForeignValue(t *testing.T) {
	ctx := context.Background()
	s := newSpace(t)
	g := s.guard(t, Config{})
	r := s.resources + "list"
	if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 2}), r, []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := g.client.Del(ctx, r).Err(); err != nil {
		t.Fatal(err)
	}
	if err := g.client.RPush(ctx, r, "x").Err(); err != nil {
		t.Fatal(err)
	}
	var me *fence.ForeignError
	if _, _, err := g.Get(ctx, r); !errors.As(err, &me) || me.Key != r {
		t.Fatalf("Get over a list: %v, want *fence.ForeignError on the value key", err)
	}
}

// TestBadArguments: bad resources, claims and configs are refused with
// typed errors before any I/O, and nothing is written.
func TestBadArguments(t *testing.T) {
	ctx := context.Background()
	s := newSpace(t)
	g := s.guard(t, Config{})
	for _, r := range []string{"", "a\x00b", "tab\t", strings.Repeat("x", fence.MaxResourceLen+1), "\xff", s.marks + "x", "a}b", "{}}"} {
		if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 1}), r, []byte("v")); !errors.Is(err, fence.ErrInvalidResource) {
			t.Errorf("PutClaim(%q): %v, want fence.ErrInvalidResource", r, err)
		}
		if _, _, err := g.Get(ctx, r); !errors.Is(err, fence.ErrInvalidResource) {
			t.Errorf("Get(%q): %v", r, err)
		}
		if _, err := g.Mark(ctx, r); !errors.Is(err, fence.ErrInvalidResource) {
			t.Errorf("Mark(%q): %v", r, err)
		}
		if err := g.Delete(fence.WithClaim(ctx, fence.Claim{Token: 1}), r); !errors.Is(err, fence.ErrInvalidResource) {
			t.Errorf("DeleteClaim(%q): %v", r, err)
		}
	}
	if n, err := g.client.Exists(ctx, "", "a\x00b", s.marks+"x", "a}b").Result(); err != nil || n != 0 {
		t.Errorf("keys written for refused resources: %d (%v)", n, err)
	}
	if err := g.Fence(ctx, s.resources+"nil", 1, nil); !errors.Is(err, fence.ErrNilArgument) {
		t.Errorf("Fence(nil write): %v", err)
	}
	for _, ok := range []string{"plain", "user:{42}:state", "{a{b}c", "a{b", "é/ü"} {
		if err := g.checkResource(ok); err != nil {
			t.Errorf("checkResource(%q): %v", ok, err)
		}
	}
	for _, cfg := range []Config{
		{},
		{Client: g.client, MarkPrefix: "has{brace"},
		{Client: g.client, MarkPrefix: "ctl\n"},
		{Client: g.client, TTL: -1},
		{Client: g.client, TTL: 500000}, // 0.5 ms
		{Client: g.client, MaxAttempts: -1},
		{Client: g.client, SettleTimeout: -1},
		{Client: g.client, CheckTimeout: -1},
	} {
		if _, err := New(context.Background(), cfg); !errors.Is(err, fence.ErrInvalidConfig) {
			t.Errorf("New(%+v): %v, want fence.ErrInvalidConfig", cfg, err)
		}
	}
	if err := fence.Stage(ctx, []byte("x")); !errors.Is(err, fence.ErrNoStager) {
		t.Errorf("Stage outside Fence: %v", err)
	}
}

// TestSameSlot: a resource's value key and mark key hash to the same
// cluster slot, whatever braces the resource has.
func TestSameSlot(t *testing.T) {
	ctx := context.Background()
	s := newSpace(t)
	g := s.guard(t, Config{})
	for _, r := range []string{"doc:1", "user:{42}:state", "{a{b}c", "a{b", "{x}", "x{}{y}", "é", "{}x", "}{a}"} {
		if g.checkResource(r) != nil {
			continue // refused: "x{}{y}" and "{}x" hash whole, and have a '}'
		}
		var slots [2]int64
		for i, k := range []string{r, g.markKey(r)} {
			n, err := g.client.ClusterKeySlot(ctx, k).Result()
			if err != nil {
				// CLUSTER KEYSLOT needs cluster mode on some versions:
				// compute it locally then.
				n = int64(keySlot(k))
			}
			slots[i] = n
		}
		if slots[0] != slots[1] {
			t.Errorf("%q: value slot %d, mark key %q slot %d", r, slots[0], g.markKey(r), slots[1])
		}
		if int64(keySlot(r)) != slots[0] {
			t.Errorf("%q: local slot %d, server %d", r, keySlot(r), slots[0])
		}
	}
}

// keySlot is Redis Cluster's slot of key: CRC16 (XMODEM) of its hash tag
// or of the whole key, mod 16384.
func keySlot(key string) uint16 {
	if tag, ok := hashTag(key); ok {
		key = tag
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}

// TestForeignValueNotReplaced: a value key of another type (hash, list,
// set, sorted set, stream) under a valid mark is not this guard's to
// replace or delete: PutClaim, DeleteClaim, Fence and Do with a higher
// token are refused with a *fence.ForeignError naming the value key, Do's and
// Fence's callbacks do not run, and neither the key nor the mark changes.
func TestForeignValueNotReplaced(t *testing.T) {
	ctx := context.Background()
	s := newSpace(t)
	g := s.guard(t, Config{})
	c := g.client
	for _, tc := range []struct {
		typ  string
		make func(k string) error
	}{
		{"hash", func(k string) error { return c.HSet(ctx, k, "f", "v").Err() }},
		{"list", func(k string) error { return c.RPush(ctx, k, "x").Err() }},
		{"set", func(k string) error { return c.SAdd(ctx, k, "x").Err() }},
		{"zset", func(k string) error { return c.ZAdd(ctx, k, redis.Z{Score: 1, Member: "x"}).Err() }},
		{"stream", func(k string) error {
			return c.XAdd(ctx, &redis.XAddArgs{Stream: k, Values: []string{"f", "v"}}).Err()
		}},
	} {
		r := s.resources + "foreign/" + tc.typ
		if err := g.Put(fence.WithClaim(ctx, fence.Claim{Token: 5, Run: "run-a"}), r, []byte("v")); err != nil {
			t.Fatal(err)
		}
		if err := c.Del(ctx, r).Err(); err != nil {
			t.Fatal(err)
		}
		if err := tc.make(r); err != nil {
			t.Fatal(err)
		}
		before, err := g.Mark(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		high := fence.Claim{Token: 9, Run: "run-b"}
		ran := func(name string) func(context.Context) error {
			return func(ctx context.Context) error {
				t.Errorf("%s: %s ran its callback over a %s value key", tc.typ, name, tc.typ)
				return fence.Stage(ctx, []byte("x"))
			}
		}
		for name, err := range map[string]error{
			"PutClaim":    g.Put(fence.WithClaim(ctx, high), r, []byte("x")),
			"DeleteClaim": g.Delete(fence.WithClaim(ctx, high), r),
			"Fence":       g.Fence(fence.WithClaim(ctx, high), r, high.Token, ran("Fence")),
			"Do":          g.Do(fence.WithClaim(ctx, high), r, ran("Do")),
		} {
			var me *fence.ForeignError
			if !errors.As(err, &me) || me.Key != r || errors.Is(err, fence.ErrStale) {
				t.Errorf("%s value key: %s: %v, want *fence.ForeignError on the value key", tc.typ, name, err)
			}
		}
		if typ, err := c.Type(ctx, r).Result(); err != nil || typ != tc.typ {
			t.Errorf("%s value key is now %q (%v)", tc.typ, typ, err)
		}
		if after, err := g.Mark(ctx, r); err != nil || after != before {
			t.Errorf("%s value key: mark %+v (%v) after refused writes, want %+v", tc.typ, after, err, before)
		}
	}
}

// TestNilContext: every call given a nil context returns fence.ErrNilArgument
// (Stage and StageDelete: fence.ErrNoStager) before any I/O, without panicking.
func TestNilContext(t *testing.T) {
	s := newSpace(t)
	g := s.guard(t, Config{})
	r := s.resources + "nilctx"
	var nilCtx context.Context
	check := func(name string, err, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Errorf("%s(nil ctx): %v, want %v", name, err, want)
		}
	}
	check("Put", g.Put(nilCtx, r, []byte("x")), fence.ErrNilArgument)
	check("Delete", g.Delete(nilCtx, r), fence.ErrNilArgument)
	check("Fence", g.Fence(nilCtx, r, 1, func(context.Context) error { return nil }), fence.ErrNilArgument)
	check("Do", g.Do(nilCtx, r, func(context.Context) error { return nil }), fence.ErrNilArgument)
	_, _, err := g.Get(nilCtx, r)
	check("Get", err, fence.ErrNilArgument)
	_, err = g.Mark(nilCtx, r)
	check("Mark", err, fence.ErrNilArgument)
	check("CheckEviction", g.CheckEviction(nilCtx), fence.ErrNilArgument)
	check("Stage", fence.Stage(nilCtx, []byte("x")), fence.ErrNoStager)
	check("StageDelete", fence.StageDelete(nilCtx), fence.ErrNoStager)
	if n, err := g.client.Exists(context.Background(), r, g.markKey(r)).Result(); err != nil || n != 0 {
		t.Errorf("keys written by calls with a nil ctx: %d (%v)", n, err)
	}
}

// TestGetMissingMatchesFenceNotFound: Get of a resource never written, and
// of one deleted by a fenced delete, matches fence.ErrNotFound as well as
// fence.ErrNotFound.
func TestGetMissingMatchesFenceNotFound(t *testing.T) {
	ctx := context.Background()
	s := newSpace(t)
	g := s.guard(t, Config{})
	r := s.resources + "missing"
	for _, step := range []string{"never written", "deleted"} {
		if step == "deleted" {
			if err := g.Delete(fence.WithClaim(ctx, fence.Claim{Token: 3}), r); err != nil {
				t.Fatal(err)
			}
		}
		_, _, err := g.Get(ctx, r)
		if !errors.Is(err, fence.ErrNotFound) {
			t.Errorf("Get %s: %v, want fence.ErrNotFound and fence.ErrNotFound", step, err)
		}
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
