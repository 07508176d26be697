package fence

import (
	"context"

	"github.com/fencekit/fencekit/internal/stagectx"
)

// Stage records value as the new value of the resource that the running
// Fence (or Do) call of a staging guard writes: ctx must be the context
// that call handed its write callback, or one derived from it. The guard
// writes value, with the mark, once the callback returns nil; nothing is
// written if it fails. When Fence calls are nested, ctx stages into the
// innermost callback it comes from. Code written against [Guard] stages
// through it without knowing the concrete guard.
//
// Errors: [ErrNoStager] when ctx comes from no running callback, or from
// the callback of a guard that does not stage (memguard, pgguard,
// mysqlguard: their callbacks write through what they hand the callback);
// [ErrAlreadyStaged] when the callback has staged a change already;
// [ErrStageClosed] when the Fence call has returned. An object-store
// guard stages value as its StageBytes does with zero options and may
// return that call's errors.
func Stage(ctx context.Context, value []byte) error {
	s, ok := stagectx.From(ctx)
	if !ok {
		return ErrNoStager
	}
	return s.StageBytes(ctx, value)
}

// StageDelete records the deletion of the value of the resource that the
// running Fence (or Do) call of a staging guard writes (its mark stays):
// a later read matches [ErrNotFound]. ctx and errors are as for [Stage].
func StageDelete(ctx context.Context) error {
	s, ok := stagectx.From(ctx)
	if !ok {
		return ErrNoStager
	}
	return s.StageDelete()
}
