package s3guard

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardtest"
	"github.com/fencekit/fencekit/guards/internal/objtest"
)

// subject adapts Guards over one bucket to guardtest.Subject. Writes go
// round-robin over the stores (each with its own client, like separate
// processes). With viaFence, writes use Fence + Stage instead of Put.
type subject struct {
	stores   []*Guard
	next     atomic.Uint64
	viaFence bool
	strict   *Guard                  // Config.Strict, for WriteStrict
	held     *Guard                  // its client holds pointer replies, for WriteHeld
	hold     *objtest.ReplyTransport // held's transport
	delayed  *Guard                  // its client holds a pointer PUT's first copy, for WriteDelayed
	delay    *objtest.HoldTransport  // delayed's transport
}

func (s *subject) pick() *Guard { return s.stores[s.next.Add(1)%uint64(len(s.stores))] }

func (s *subject) Write(ctx context.Context, resource string, token fence.Token, value string) error {
	return s.write(ctx, s.pick(), resource, token, value)
}

// write is one guarded write through st: Put, or Fence + Stage.
func (s *subject) write(ctx context.Context, st *Guard, resource string, token fence.Token, value string) error {
	if !s.viaFence {
		_, err := st.PutBytes(fence.WithClaim(ctx, fence.ClaimFor(ctx, token)), resource, []byte(value), PutOptions{ContentType: "text/plain"})
		return err
	}
	return st.Fence(ctx, resource, token, func(ctx context.Context) error {
		return Stage(ctx, strings.NewReader(value), int64(len(value)), PutOptions{})
	})
}

// WriteClaim presents c explicitly: the token as the argument, the run
// through the ctx (fence.ClaimFor pairs them).
func (s *subject) WriteClaim(ctx context.Context, resource string, c fence.Claim, value string) error {
	return s.Write(fence.WithClaim(ctx, c), resource, c.Token, value)
}

// WriteContext drives the ctx-first form: PutBytes, or Do + Stage.
func (s *subject) WriteContext(ctx context.Context, resource, value string) error {
	st := s.pick()
	if !s.viaFence {
		_, err := st.PutBytes(ctx, resource, []byte(value), PutOptions{ContentType: "text/plain"})
		return err
	}
	return st.Do(ctx, resource, func(ctx context.Context) error {
		return Stage(ctx, strings.NewReader(value), int64(len(value)), PutOptions{})
	})
}

// Guard is the guard the subject's writes go through (guardtest.Fencer):
// the first of its stores.
func (s *subject) Guard() fence.Guard { return s.stores[0] }

func (s *subject) Read(ctx context.Context, resource string) (string, fence.Token, bool, error) {
	b, info, err := s.pick().GetBytes(ctx, resource)
	if errors.Is(err, fence.ErrNotFound) {
		return "", 0, false, nil
	}
	if err != nil {
		return "", 0, false, err
	}
	return string(b), info.Token, true, nil
}

// WriteFailing stages content and then fails: the staged data must never
// become visible and the mark must not move.
func (s *subject) WriteFailing(ctx context.Context, resource string, token fence.Token) error {
	return s.pick().Fence(ctx, resource, token, func(ctx context.Context) error {
		if err := Stage(ctx, strings.NewReader("must not appear"), 15, PutOptions{}); err != nil {
			return err
		}
		return guardtest.ErrInjected
	})
}

// s3BadResources are names fence.ValidateResource allows but the S3 guard
// refuses.
var s3BadResources = []string{
	"/leading", "trailing/", "a//b", "a/./b", "a/../b", "back\\slash",
	strings.Repeat("s", MaxSegmentLen+1), DefaultDataPrefix + "x",
}

// TestConformance runs guardtest.Run over three axes: the client adapter
// (forEachKind), the write path (Put; Fence + Stage) and the pointer cache
// (on, the default, whose four stores go stale whenever another store
// writes; off). Four runs hold every pair of values (a pairwise design):
// each adapter runs both paths and both cache modes, and each path both
// cache modes. The product of the three axes, eight runs of about 25 s,
// repeated every pair twice.
func TestConformance(t *testing.T) {
	i := 0
	forEachKind(t, func(t *testing.T, kind clientKind) {
		for p, viaFence := range []bool{false, true} {
			name := map[bool]string{false: "Put", true: "FenceStage"}[viaFence]
			cache := cacheModes[(i+p)%len(cacheModes)]
			t.Run(name+"/"+cache.name, func(t *testing.T) {
				e := newEnv(t, kind)
				sub := newSubject(t, e, viaFence, func(c *Config) {
					c.MaxAttempts = 64
					c.PointerCacheSize = cache.size
				})
				guardtest.Run(t, guardtest.Config{
					New:          func(*testing.T) guardtest.Subject { return sub },
					BadResources: s3BadResources,
				})
			})
		}
		i++
	})
}
