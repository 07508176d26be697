package gcsguard

import (
	"context"
	"errors"
	"testing"

	"github.com/fencekit/fencekit/fence"
)

// TestSweepRemovesNothing: a resource written twice and deleted keeps one
// object, and Sweep finds nothing to remove; it checks its input like the
// other reads (a nil ctx: TestNilContext).
func TestSweepRemovesNothing(t *testing.T) {
	ctx := context.Background()
	e := newEmulator(t)
	s := e.store(t, "", Config{})
	for tok, v := range []string{"one", "two"} {
		if _, err := s.PutBytes(fence.WithClaim(ctx, fence.ClaimFor(ctx, fence.Token(tok+1))), "k", []byte(v), PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Delete(fence.WithClaim(ctx, fence.ClaimFor(ctx, 3)), "k"); err != nil {
		t.Fatal(err)
	}
	before := objectCount(t, e, s.name)
	n, err := s.Sweep(ctx, "k")
	if err != nil || n != 0 {
		t.Fatalf("Sweep = %d, %v; want 0, nil", n, err)
	}
	if after := objectCount(t, e, s.name); after != before {
		t.Fatalf("%d objects after Sweep, %d before", after, before)
	}
	if _, err := s.Sweep(ctx, "bad\x00key"); !errors.Is(err, fence.ErrInvalidResource) {
		t.Errorf("Sweep of a bad resource: %v, want fence.ErrInvalidResource", err)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Sweep(ended, "k"); !errors.Is(err, context.Canceled) {
		t.Errorf("Sweep with an ended ctx: %v, want context.Canceled", err)
	}
}
