package natsguard

import (
	"context"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/internal/engine"
)

// Stage records value as the new value of the resource a running Fence
// call guards; Fence writes it once the callback returns nil. Errors:
// fence.ErrNoStager, fence.ErrAlreadyStaged, fence.ErrStageClosed.
func Stage(ctx context.Context, value []byte) error {
	return engine.Stage(ctx, name, engine.Change{Op: engine.OpPut, Value: value})
}

// StageDelete records a tombstone for the resource.
func StageDelete(ctx context.Context) error {
	return engine.Stage(ctx, name, engine.Change{Op: engine.OpDelete})
}

// Fence implements fence.Guard: it reads resource's mark and, if token is
// admitted (with the run ctx carries for that token, fence.ClaimFor), runs
// write with a ctx that carries the admitted claim
// (fence.ClaimFromContext); write states the new value with Stage or
// StageDelete. When write returns nil the staged change is written as
// Put writes it, deciding again. A write that staged nothing raises
// the mark alone: the value is kept, and a resource without a value gets
// a tombstone (a later Get reports fence.ErrNotFound). If write fails
// nothing is written. Effects of write outside the bucket are not fenced.
func (g *Guard) Fence(ctx context.Context, resource string, token fence.Token, write func(ctx context.Context) error) error {
	return g.eng.Fence(ctx, resource, token, write)
}

// Do is Fence under the claim ctx carries (fence.ClaimFromContext; none:
// fence.ErrNoToken, write not called).
func (g *Guard) Do(ctx context.Context, resource string, write func(ctx context.Context) error) error {
	return g.eng.Do(ctx, resource, write)
}
