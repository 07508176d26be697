package s3guard

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/require"
)

// BenchmarkPut compares a plain PutObject with a guarded Put of the same
// 4 KiB, in one run: steady state (overwriting an existing key, one token)
// and first writes to fresh keys. "guarded-keep" is the steady state with
// KeepSuperseded (no removal of the superseded data object).
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
		{"fresh/plain", plain, true},
		{"fresh/guarded", guarded(s), true},
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
// (GET pointer, GET data with If-Match).
func BenchmarkGet(b *testing.B) {
	e := newEnv(b)
	ctx := testCtx(b)
	body := bytes.Repeat([]byte("x"), 4<<10)
	s := e.store(b, nil, nil)
	_, err := e.rawPut(b, "plain", body, minio.PutObjectOptions{})
	require.NoError(b, err)
	_, err = s.PutBytes(ctx, "guarded", 1, body, PutOptions{})
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
}
