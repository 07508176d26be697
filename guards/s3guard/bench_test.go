package s3guard

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/require"
)

// BenchmarkPut compares a plain PutObject with a guarded Put of the same
// 4 KiB, in one run: steady state (overwriting an existing key, one token)
// and first writes to fresh keys. "guarded-keep" is the steady state with
// KeepSuperseded (no removal of the superseded data object), "guarded-inline"
// stores the 4 KiB inside the pointer (Config.InlineMax).
//
// Requests per guarded Put: GET pointer, PUT data (If-None-Match: *), PUT
// pointer (If-Match / If-None-Match: *), and on overwrite DELETE of the
// superseded data object (skipped with KeepSuperseded).
func BenchmarkPut(b *testing.B) {
	e := newEnv(b)
	ctx := testCtx(b)
	body := bytes.Repeat([]byte("x"), 4<<10)
	s := e.store(b, nil, nil)
	keep := e.store(b, nil, func(c *Config) { c.KeepSuperseded = true })
	inl := e.store(b, nil, func(c *Config) { c.InlineMax = len(body) })
	plain := func(key string) {
		_, err := e.client.PutObject(ctx, e.bucket, key, bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{})
		if err != nil {
			b.Fatal(err)
		}
	}
	guarded := func(s *Store) func(string) {
		return func(key string) {
			if _, err := s.PutBytes(ctx, key, 1, body, PutOptions{}); err != nil {
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
}

// BenchmarkGet compares a plain GetObject of 4 KiB with a guarded Get
// (GET pointer, GET data with If-Match) and an inline one (GET pointer).
func BenchmarkGet(b *testing.B) {
	e := newEnv(b)
	ctx := testCtx(b)
	body := bytes.Repeat([]byte("x"), 4<<10)
	s := e.store(b, nil, nil)
	_, err := e.rawPut(b, "plain", body, minio.PutObjectOptions{})
	require.NoError(b, err)
	_, err = s.PutBytes(ctx, "guarded", 1, body, PutOptions{})
	require.NoError(b, err)
	inl := e.store(b, nil, func(c *Config) { c.InlineMax = len(body) })
	_, err = inl.PutBytes(ctx, "inline", 1, body, PutOptions{})
	require.NoError(b, err)
	b.Run("plain", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for i := 0; i < b.N; i++ {
			if _, _, err := e.rawGet(b, "plain"); err != nil {
				b.Fatal(err)
			}
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
}

// BenchmarkPutPaired times a plain PutObject and a guarded Put of the same
// 4 KiB alternately in every iteration, so both see the same load on a
// shared machine, and reports each one's mean and their ratio.
func BenchmarkPutPaired(b *testing.B) {
	e := newEnv(b)
	ctx := testCtx(b)
	body := bytes.Repeat([]byte("x"), 4<<10)
	for _, bc := range []struct {
		name  string
		fresh bool
		keep  bool
		inl   bool
	}{
		{"overwrite", false, false, false},
		{"overwrite-keep", false, true, false},
		{"overwrite-inline", false, false, true},
		{"fresh", true, false, false},
		{"fresh-inline", true, false, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := e.store(b, nil, func(c *Config) {
				c.KeepSuperseded = bc.keep
				if bc.inl {
					c.InlineMax = len(body)
				}
			})
			plainKey, guardedKey := "paired/"+bc.name+"/plain", "paired/"+bc.name+"/guarded"
			_, err := e.client.PutObject(ctx, e.bucket, plainKey, bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{})
			require.NoError(b, err)
			_, err = s.PutBytes(ctx, guardedKey, 1, body, PutOptions{})
			require.NoError(b, err)
			var plainNs, guardedNs time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				pk, gk := plainKey, guardedKey
				if bc.fresh {
					pk, gk = fmt.Sprintf("%s/%d", plainKey, i), fmt.Sprintf("%s/%d", guardedKey, i)
				}
				t0 := time.Now()
				if _, err := e.client.PutObject(ctx, e.bucket, pk, bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{}); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if _, err := s.PutBytes(ctx, gk, 1, body, PutOptions{}); err != nil {
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
}
