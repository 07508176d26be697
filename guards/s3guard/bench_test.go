package s3guard

import (
	"github.com/fencekit/fencekit/fence"

	"bytes"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/guards/s3guard/s3client"
)

// BenchmarkPut compares a plain PutObject with a guarded Put of the same
// 4 KiB, in one run: steady state (overwriting an existing key, one token)
// and first writes to fresh keys. "guarded-keep" is the steady state with
// KeepSuperseded (no removal of the superseded data object), "guarded-inline"
// stores the 4 KiB inside the pointer (Config.InlineMax).
//
// Requests per guarded Put: GET pointer (skipped on overwrite, where the
// Guard's pointer cache knows the key), PUT data (If-None-Match: *), PUT
// pointer (If-Match / If-None-Match: *), and on overwrite DELETE of the
// superseded data object (skipped with KeepSuperseded).
func BenchmarkPut(b *testing.B) {
	forEachClientB(b, func(b *testing.B, e env) {
		ctx := testCtx(b)
		body := bytes.Repeat([]byte("x"), 4<<10)
		s := e.store(b, nil, nil)
		keep := e.store(b, nil, func(c *Config) { c.KeepSuperseded = true })
		inl := e.store(b, nil, func(c *Config) { c.InlineMax = len(body) })
		plain := func(key string) {
			_, err := e.client.Put(ctx, e.bucket, key, bytes.NewReader(body), int64(len(body)), s3client.PutOptions{})
			if err != nil {
				b.Fatal(err)
			}
		}
		guarded := func(s *Guard) func(string) {
			return func(key string) {
				if _, err := s.PutBytes(fence.WithClaim(ctx, fence.ClaimFor(ctx, 1)), key, body, PutOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		}
		for _, bc := range []struct {
			name  string
			write func(string)
			fresh bool
		}{
			{"overwrite/plain", plain, false},
			{"overwrite/guarded", guarded(s), false},
			{"overwrite/guarded-keep", guarded(keep), false},
			{"overwrite/guarded-inline", guarded(inl), false},
			{"fresh/plain", plain, true},
			{"fresh/guarded", guarded(s), true},
			{"fresh/guarded-inline", guarded(inl), true},
		} {
			b.Run(bc.name, func(b *testing.B) {
				key := "bench/" + bc.name
				bc.write(key) // the key exists before timing starts
				b.SetBytes(int64(len(body)))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if bc.fresh {
						key = fmt.Sprintf("bench/%s/%d", bc.name, i)
					}
					bc.write(key)
				}
			})
		}
	})
}

// BenchmarkGet compares a plain GetObject of 4 KiB with a guarded Get
// (GET pointer, GET data with If-Match) and an inline one (GET pointer).
func BenchmarkGet(b *testing.B) {
	forEachClientB(b, func(b *testing.B, e env) {
		ctx := testCtx(b)
		body := bytes.Repeat([]byte("x"), 4<<10)
		s := e.store(b, nil, nil)
		_, err := e.client.Put(ctx, e.bucket, "plain", bytes.NewReader(body), int64(len(body)), s3client.PutOptions{})
		require.NoError(b, err)
		_, err = s.PutBytes(fence.WithClaim(ctx, fence.ClaimFor(ctx, 1)), "guarded", body, PutOptions{})
		require.NoError(b, err)
		inl := e.store(b, nil, func(c *Config) { c.InlineMax = len(body) })
		_, err = inl.PutBytes(fence.WithClaim(ctx, fence.ClaimFor(ctx, 1)), "inline", body, PutOptions{})
		require.NoError(b, err)
		b.Run("plain", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for i := 0; i < b.N; i++ {
				rc, _, err := e.client.Get(ctx, e.bucket, "plain", s3client.GetOptions{})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, rc); err != nil {
					b.Fatal(err)
				}
				_ = rc.Close()
			}
		})
		b.Run("guarded", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for i := 0; i < b.N; i++ {
				if _, _, err := s.GetBytes(ctx, "guarded"); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("guarded-inline", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for i := 0; i < b.N; i++ {
				if _, _, err := inl.GetBytes(ctx, "inline"); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// BenchmarkPutPaired times a plain PutObject and a guarded Put of the same
// content alternately in every iteration, so both see the same load on a
// shared machine, and reports each one's mean and their ratio. Cases:
//
//   - overwrite: steady state, one token, the pointer cache on (default):
//     PUT data + conditional PUT pointer + DELETE of the superseded data.
//   - overwrite-nocache: the same with PointerCacheSize -1 (+ GET pointer).
//   - overwrite-keep: cache on, KeepSuperseded (no DELETE).
//   - overwrite-inline, overwrite-inline-nocache: InlineMax = size, one
//     conditional PUT (+ GET pointer without the cache).
//   - fresh, fresh-inline: first write to a new key (the cache cannot know
//     it: GET pointer (404) first).
//   - overwrite-1MiB, overwrite-1MiB-keep, fresh-1MiB: large content.
//   - floor-2put: not the guard but two plain PutObjects (the content and a
//     pointer-sized body): the cost of the two durable writes a non-inline
//     guarded write needs.
func BenchmarkPutPaired(b *testing.B) {
	forEachClientB(b, func(b *testing.B, e env) {
		ctx := testCtx(b)
		const small, large = 4 << 10, 1 << 20
		pointerBody := bytes.Repeat([]byte("p"), 384) // about a pointer's size
		for _, bc := range []struct {
			name  string
			size  int
			fresh bool
			mod   func(*Config)
			floor bool
		}{
			{name: "overwrite", size: small},
			{name: "overwrite-nocache", size: small, mod: func(c *Config) { c.PointerCacheSize = -1 }},
			{name: "overwrite-keep", size: small, mod: func(c *Config) { c.KeepSuperseded = true }},
			{name: "overwrite-inline", size: small, mod: func(c *Config) { c.InlineMax = small }},
			{name: "overwrite-inline-nocache", size: small, mod: func(c *Config) { c.InlineMax = small; c.PointerCacheSize = -1 }},
			{name: "fresh", size: small, fresh: true},
			{name: "fresh-inline", size: small, fresh: true, mod: func(c *Config) { c.InlineMax = small }},
			{name: "overwrite-1MiB", size: large},
			{name: "overwrite-1MiB-keep", size: large, mod: func(c *Config) { c.KeepSuperseded = true }},
			{name: "fresh-1MiB", size: large, fresh: true},
			{name: "floor-2put", size: small, floor: true},
		} {
			b.Run(bc.name, func(b *testing.B) {
				body := bytes.Repeat([]byte("x"), bc.size)
				s := e.store(b, nil, bc.mod)
				plainPut := func(key string, body []byte) error {
					_, err := e.client.Put(ctx, e.bucket, key, bytes.NewReader(body), int64(len(body)), s3client.PutOptions{})
					return err
				}
				guarded := func(key string) error {
					_, err := s.PutBytes(fence.WithClaim(ctx, fence.ClaimFor(ctx, 1)), key, body, PutOptions{})
					return err
				}
				if bc.floor {
					guarded = func(key string) error {
						if err := plainPut(key+"/data", body); err != nil {
							return err
						}
						return plainPut(key, pointerBody)
					}
				}
				plainKey, guardedKey := "paired/"+bc.name+"/plain", "paired/"+bc.name+"/guarded"
				require.NoError(b, plainPut(plainKey, body))
				require.NoError(b, guarded(guardedKey)) // also warms the pointer cache
				var plainNs, guardedNs time.Duration
				b.SetBytes(int64(bc.size))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					pk, gk := plainKey, guardedKey
					if bc.fresh {
						pk, gk = fmt.Sprintf("%s/%d", plainKey, i), fmt.Sprintf("%s/%d", guardedKey, i)
					}
					t0 := time.Now()
					if err := plainPut(pk, body); err != nil {
						b.Fatal(err)
					}
					t1 := time.Now()
					if err := guarded(gk); err != nil {
						b.Fatal(err)
					}
					plainNs += t1.Sub(t0)
					guardedNs += time.Since(t1)
				}
				b.ReportMetric(float64(plainNs.Nanoseconds())/float64(b.N), "plain-ns/op")
				b.ReportMetric(float64(guardedNs.Nanoseconds())/float64(b.N), "guarded-ns/op")
				b.ReportMetric(float64(guardedNs)/float64(plainNs), "guarded/plain")
			})
		}
	})
}
