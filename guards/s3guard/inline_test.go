package s3guard

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardtest"
)

// TestInline: with Config.InlineMax, small content lives in the pointer body
// itself; everything else behaves the same, and stores with and without
// inlining read each other's writes.
func TestInline(t *testing.T) {
	forEachClient(t, func(t *testing.T, e env) {
		ctx := testCtx(t)
		in := e.store(t, nil, func(c *Config) { c.InlineMax = 4096 })
		plain := e.store(t, e.newClient(t, nil), nil)
		const key = "inline/k"
		small := bytes.Repeat([]byte("s"), 4096)

		i7, err := in.PutBytes(fence.WithClaim(ctx, fence.ClaimFor(ctx, 7)), key, small, PutOptions{ContentType: "text/plain", Metadata: map[string]string{"a": "<&>"}})
		require.NoError(t, err)
		assert.True(t, i7.Inline)
		assert.Empty(t, i7.DataKey)
		assert.Equal(t, []string{key}, e.listAll(t), "no data object")
		body, _, err := e.rawGet(t, key)
		require.NoError(t, err)
		var p struct {
			Inline []byte `json:"inline"`
		}
		require.NoError(t, json.Unmarshal(body, &p), "a plain reader base64-decodes the inline field")
		assert.Equal(t, small, p.Inline)

		// Identical bytes under token 8; token 7 refused afterwards.
		i8, err := in.PutBytes(fence.WithClaim(ctx, fence.ClaimFor(ctx, 8)), key, small, PutOptions{ContentType: "text/plain"})
		require.NoError(t, err)
		_, err = in.PutBytes(fence.WithClaim(ctx, fence.ClaimFor(ctx, 7)), key, small, PutOptions{})
		se, ok := fence.IsStale(err)
		require.True(t, ok, "%v", err)
		assert.Equal(t, fence.Token(8), se.Highest)
		got, info := content(t, plain, key) // read by a store without inlining
		assert.Equal(t, string(small), got)
		assert.Equal(t, i8.WriteID, info.WriteID)
		assert.True(t, info.Inline)

		// Larger content goes to a data object, then back inline; the
		// superseded data object is removed.
		big := strings.Repeat("b", 4097)
		ib, err := in.PutBytes(fence.WithClaim(ctx, fence.ClaimFor(ctx, 9)), key, []byte(big), PutOptions{})
		require.NoError(t, err)
		assert.False(t, ib.Inline)
		assert.ElementsMatch(t, []string{key, ib.DataKey}, e.listAll(t))
		_, err = in.PutBytes(fence.WithClaim(ctx, fence.ClaimFor(ctx, 9)), key, []byte("tiny"), PutOptions{})
		require.NoError(t, err)
		assert.Equal(t, []string{key}, e.listAll(t))
		got, _ = content(t, plain, key)
		assert.Equal(t, "tiny", got)

		// A mark-only Fence keeps inline content; empty content works inline.
		require.NoError(t, in.Fence(ctx, key, 10, func(ctx context.Context) error { return nil }))
		got, info = content(t, in, key)
		assert.Equal(t, "tiny", got)
		assert.Equal(t, fence.Token(10), info.Token)
		_, err = in.PutBytes(fence.WithClaim(ctx, fence.ClaimFor(ctx, 1)), "inline/empty", nil, PutOptions{})
		require.NoError(t, err)
		got, info = content(t, plain, "inline/empty")
		assert.Empty(t, got)
		assert.True(t, info.Inline)

		// A short reader is an error and changes nothing.
		before := e.snapshot(t)
		_, err = in.Put(fence.WithClaim(ctx, fence.ClaimFor(ctx, 11)), key, strings.NewReader("abc"), 10, PutOptions{})
		require.Error(t, err)
		assert.Equal(t, before, e.snapshot(t))

		for _, bad := range []int{-1, MaxInline + 1} {
			_, err := New(Config{Client: e.client, Bucket: e.bucket, InlineMax: bad})
			assert.ErrorIs(t, err, fence.ErrInvalidConfig)
		}
	})
}

// TestConformanceInline runs guardtest.Run with inline data, once per
// adapter with the cache modes alternating: each adapter and each cache
// mode is run inline (TestConformance runs every pair of adapter, write
// path and cache mode).
func TestConformanceInline(t *testing.T) {
	i := 0
	forEachKind(t, func(t *testing.T, kind clientKind) {
		cache := cacheModes[i%len(cacheModes)]
		i++
		t.Run(cache.name, func(t *testing.T) {
			e := newEnv(t, kind)
			sub := newSubject(t, e, false, func(c *Config) {
				c.MaxAttempts = 64
				c.InlineMax = MaxInline
				c.PointerCacheSize = cache.size
			})
			guardtest.Run(t, guardtest.Config{
				New:          func(*testing.T) guardtest.Subject { return sub },
				BadResources: s3BadResources,
			})
		})
	})
}
