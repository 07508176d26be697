//go:build unix

package fileguard

import (
	"context"

	"github.com/fencekit/fencekit/fence"
)

// Fence implements fence.Guard: under resource's lock it reads the mark
// and, if token is admitted (with the run ctx carries for that token,
// fence.ClaimFor), runs write with a ctx that carries the admitted claim
// (fence.ClaimFromContext); write states the new content with fence.Stage
// or fence.StageDelete (a tombstone). When write returns nil the staged
// content is written as Put writes it, still under the lock. A write that staged nothing
// raises the mark alone: the content is kept, and a resource without
// content gets a tombstone (a later Get reports fence.ErrNotFound). If
// write fails, nothing is written. Effects of write outside the file are
// not fenced.
func (g *Guard) Fence(ctx context.Context, resource string, token fence.Token, write func(ctx context.Context) error) error {
	return g.eng.Fence(ctx, resource, token, write)
}

// Do is Fence under the claim ctx carries (fence.ClaimFromContext; none:
// fence.ErrNoToken, write not called).
func (g *Guard) Do(ctx context.Context, resource string, write func(ctx context.Context) error) error {
	return g.eng.Do(ctx, resource, write)
}
