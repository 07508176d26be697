package gcsguard

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fencekit/fencekit/fence"
)

// countUploads counts the upload requests a client sends.
type countUploads struct {
	next http.RoundTripper
	n    atomic.Int32
}

func (c *countUploads) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasPrefix(req.URL.Path, "/upload/") {
		c.n.Add(1)
	}
	return c.next.RoundTrip(req)
}

// TestMaxAttemptsCountsConditionalWrites: MaxAttempts is the engine's, as
// in every guard: each conditional write of a call counts, the first
// included. A writer whose every write loses its race to an equal-token
// writer (not stale, so worth retrying) sends exactly MaxAttempts
// conditional writes and then ends with fence.ErrBusy, having written
// nothing; with one attempt more it lands.
func TestMaxAttemptsCountsConditionalWrites(t *testing.T) {
	ctx := context.Background()
	e := newEmulator(t)
	bucket := e.bucket(t)
	other := e.store(t, bucket, Config{})
	for _, max := range []int{1, 3, DefaultMaxAttempts} {
		cu := &countUploads{}
		s := e.store(t, bucket, Config{MaxAttempts: max,
			Client: e.clientVia(t, func(rt http.RoundTripper) http.RoundTripper { cu.next = rt; return cu })})
		races := 0
		s.afterRead = func(key string) {
			if races++; races <= max { // another writer wins the race
				if _, err := other.PutBytes(fence.WithClaim(ctx, fence.Claim{Token: 5}), key, []byte("theirs"), PutOptions{}); err != nil {
					t.Error(err)
				}
			}
		}
		_, err := s.PutBytes(fence.WithClaim(ctx, fence.Claim{Token: 5}), "attempts", []byte("mine"), PutOptions{})
		if !errors.Is(err, fence.ErrBusy) || cu.n.Load() != int32(max) {
			t.Fatalf("MaxAttempts %d: %v after %d conditional writes, want fence.ErrBusy after %d", max, err, cu.n.Load(), max)
		}
		if b, _, err := s.GetBytes(ctx, "attempts"); err != nil || string(b) != "theirs" {
			t.Fatalf("MaxAttempts %d: content %q, %v; want theirs", max, b, err)
		}
		races = max - 1 // the last race is lost, then one attempt more lands
		s.eng.MaxAttempts = max + 1
		cu.n.Store(0)
		if _, err := s.PutBytes(fence.WithClaim(ctx, fence.Claim{Token: 5}), "attempts", []byte("mine"), PutOptions{}); err != nil || cu.n.Load() != 2 {
			t.Fatalf("MaxAttempts %d: %v after %d conditional writes, want success after 2", max+1, err, cu.n.Load())
		}
	}
}
