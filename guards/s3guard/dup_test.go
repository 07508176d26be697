package s3guard

import (
	"context"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardtest"
	"github.com/fencekit/fencekit/guards/internal/objtest"
)

var (
	_ guardtest.DuplicateWriter = (*subject)(nil)
	_ objtest.HeldWriter        = (*subject)(nil)
)

// WriteDelayed implements guardtest.DuplicateWriter through the delayed
// guard: its pointer PUT's first copy is held, the SDK's retries go
// through.
func (s *subject) WriteDelayed(ctx context.Context, resource string, c fence.Claim, value string) (func(context.Context) error, error) {
	h, err := s.WriteHolding(ctx, resource, c, value)
	return objtest.DeliverFunc(h), err
}

// WriteHolding implements objtest.HeldWriter through the delayed guard.
func (s *subject) WriteHolding(ctx context.Context, resource string, c fence.Claim, value string) (*objtest.Held, error) {
	path := "/" + s.delayed.bucket + "/" + resource
	s.delay.Arm(path)
	err := s.write(fence.WithClaim(ctx, c), s.delayed, resource, c.Token, value)
	return s.delay.Take(path), err
}

// TestDelayedCopyRefused: the kit's delayed-duplicate check is not vacuous
// here (objtest.CheckDelayedCopyRefused): the held copy of a pointer PUT is
// refused by MinIO with 412, its If-Match naming the ETag the later write
// replaced.
func TestDelayedCopyRefused(t *testing.T) {
	forEachKind(t, func(t *testing.T, kind clientKind) {
		for _, viaFence := range []bool{false, true} {
			sub := newSubject(t, newEnv(t, kind), viaFence, func(*Config) {})
			if err := objtest.CheckDelayedCopyRefused(testCtx(t), sub, "dup"); err != nil {
				t.Errorf("fence %v: %v", viaFence, err)
			}
		}
	})
}
