package objstage

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/fencekit/fencekit/fence"
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

// ContextErr is fence.WrapContext, except that an error matching
// fence.ErrBusy seen after ctx ended is replaced by the context's error:
// the retries stopped because the context ended, and a retry with the same
// context cannot succeed. prefix starts the replacement's message. A nil
// ctx leaves err as it is.
func ContextErr(ctx context.Context, prefix string, err error) error {
	if err == nil || ctx == nil {
		return err
	}
	cerr := fence.ContextError(ctx)
	if cerr == nil {
		return err
	}
	if errors.Is(err, fence.ErrBusy) {
		return fmt.Errorf("%s: gave up after the context ended (%s): %w", prefix, err.Error(), cerr)
	}
	return fence.WrapContext(ctx, err)
}
