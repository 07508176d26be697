package gcsguard

import (
	"context"
	"errors"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/internal/objtest"
)

// errHeld is what the client library sees for an upload the delayed
// guard's transport holds: a connection reset before the reply, which it
// retries.
var errHeld = errors.New("connection reset by peer (test: request held in transit)")

// WriteDelayed implements guardtest.DuplicateWriter through the delayed
// guard: its upload's first copy is held, the library's retries go
// through.
func (a *subject) WriteDelayed(ctx context.Context, r string, c fence.Claim, v string) (func(context.Context) error, error) {
	h, err := a.WriteHolding(ctx, r, c, v)
	return objtest.DeliverFunc(h), err
}

// WriteHolding implements objtest.HeldWriter through the delayed guard.
func (a *subject) WriteHolding(ctx context.Context, r string, c fence.Claim, v string) (*objtest.Held, error) {
	a.delay.Arm(r)
	err := a.write(ctx, a.delayed, r, c, v)
	return a.delay.Take(r), err
}

// TestDelayedCopyRefused: the kit's delayed-duplicate check is not vacuous
// here (objtest.CheckDelayedCopyRefused): the held copy of the commit
// upload is refused with 412, its generation precondition naming the
// generation the later write replaced.
func TestDelayedCopyRefused(t *testing.T) {
	e := newEmulator(t)
	bucket := e.bucket(t)
	for _, viaFence := range []bool{false, true} {
		sub := newSubject(t, e, bucket, viaFence)
		r := map[bool]string{false: "dup/put", true: "dup/fence"}[viaFence]
		if err := objtest.CheckDelayedCopyRefused(context.Background(), sub, r); err != nil {
			t.Errorf("fence %v: %v", viaFence, err)
		}
	}
}
