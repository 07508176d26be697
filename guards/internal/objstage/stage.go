package objstage

import (
	"context"
	"io"

	"github.com/fencekit/fencekit/guards/internal/engine"
)

// StageContent is a guard's Stage of size bytes from r: it finds guard
// name's engine.Stager in ctx, refuses bad options (optsErr, the guard's
// check of them) and a bad size or nil reader (CheckBody with invalid),
// and stages what build makes of the content (under the Stager's lock).
func StageContent(ctx context.Context, name string, optsErr error, r io.Reader, size int64, invalid error,
	build func(st *engine.Stager) (engine.Change, error)) error {
	st, err := engine.StagerOf(ctx, name)
	if err != nil {
		return err
	}
	if optsErr != nil {
		return optsErr
	}
	if err := CheckBody(r, size, invalid); err != nil {
		return err
	}
	return st.Stage(func() (engine.Change, error) { return build(st) })
}
