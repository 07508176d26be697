package gcsguard

import (
	"github.com/fencekit/fencekit/fence"

	"bytes"
	"testing"
	"time"
)

// BenchmarkPutPaired times a plain upload (storage.Writer, no
// precondition, no metadata) and a guarded PutBytesClaim of the same
// content in every iteration, alternating which goes first, so both see
// the same load, and reports each one's mean, their ratio and the HTTP
// requests each made per write. Both overwrite an existing object under one
// token (the steady state of a holder): the guarded write is a metadata GET
// plus the same upload with ifGenerationMatch and gcsguard's metadata.
// Cases:
//
//   - 4KiB, 1MiB: the plain writer uses the Guard's chunk size
//     (DefaultChunkSize, 256 KiB), so both take the same upload path and
//     the ratio is the guard's own cost: 4 KiB is one upload request, 1 MiB
//     a resumable upload in chunks.
//   - 1MiB-2MiBchunk: both with ChunkSize 2 MiB: 1 MiB in one request.
//   - 4KiB-libdefault, 1MiB-libdefault: the plain writer left at the client
//     library's default chunk size (16 MiB: one request, but a 16 MiB
//     buffer allocated per Writer), the Guard at its default.
func BenchmarkPutPaired(b *testing.B) {
	e := newEmulator(b)
	bucket := e.bucket(b)
	plainBucket := e.client(b).Bucket(bucket)
	const small, large = 4 << 10, 1 << 20
	for _, bc := range []struct {
		name       string
		size       int
		plainChunk int // 0: the client library's default
		storeChunk int // 0: DefaultChunkSize
	}{
		{name: "4KiB", size: small, plainChunk: DefaultChunkSize},
		{name: "1MiB", size: large, plainChunk: DefaultChunkSize},
		{name: "1MiB-2MiBchunk", size: large, plainChunk: 2 << 20, storeChunk: 2 << 20},
		{name: "4KiB-libdefault", size: small},
		{name: "1MiB-libdefault", size: large},
	} {
		b.Run(bc.name, func(b *testing.B) {
			body := bytes.Repeat([]byte("x"), bc.size)
			s := e.store(b, bucket, Config{ChunkSize: bc.storeChunk})
			ctx := b.Context()
			plainKey, guardedKey := "paired/"+bc.name+"/plain", "paired/"+bc.name+"/guarded"
			plain := func() error {
				w := plainBucket.Object(plainKey).NewWriter(ctx)
				if bc.plainChunk != 0 {
					w.ChunkSize = bc.plainChunk
				}
				if _, err := w.Write(body); err != nil {
					_ = w.Close()
					return err
				}
				return w.Close()
			}
			guarded := func() error {
				_, err := s.PutBytes(fence.WithClaim(ctx, fence.ClaimFor(ctx, 1)), guardedKey, body, PutOptions{})
				return err
			}
			// Both keys exist before timing starts.
			if err := plain(); err != nil {
				b.Fatal(err)
			}
			if err := guarded(); err != nil {
				b.Fatal(err)
			}
			var plainNs, guardedNs time.Duration
			var plainReq, guardedReq int64
			timed := func(f func() error, total *time.Duration, reqs *int64) {
				r0, t0 := e.requests.Load(), time.Now()
				if err := f(); err != nil {
					b.Fatal(err)
				}
				*total += time.Since(t0)
				*reqs += e.requests.Load() - r0
			}
			b.SetBytes(int64(bc.size))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if i%2 == 0 {
					timed(plain, &plainNs, &plainReq)
					timed(guarded, &guardedNs, &guardedReq)
				} else {
					timed(guarded, &guardedNs, &guardedReq)
					timed(plain, &plainNs, &plainReq)
				}
			}
			b.ReportMetric(float64(plainNs.Nanoseconds())/float64(b.N), "plain-ns/op")
			b.ReportMetric(float64(guardedNs.Nanoseconds())/float64(b.N), "guarded-ns/op")
			b.ReportMetric(float64(guardedNs)/float64(plainNs), "guarded/plain")
			b.ReportMetric(float64(plainReq)/float64(b.N), "plain-req/op")
			b.ReportMetric(float64(guardedReq)/float64(b.N), "guarded-req/op")
		})
	}
}
