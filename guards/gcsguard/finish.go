package gcsguard

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/fence"
)

// finish ends every fenced write that got past the argument checks: it
// records the outcome err through the Guard's guardobs.Recorder (which
// also logs a token reuse at Error) and returns err through contextErr.
func (s *Guard) finish(ctx context.Context, err error) error {
	s.met.Decision(ctx, err)
	return contextErr(ctx, err)
}

// contextErr is fence.WrapContext, except that an fence.ErrBusy seen after
// ctx ended is replaced by the context's error: the retries stopped because
// the context ended, and a retry with the same context cannot succeed.
func contextErr(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	cerr := fence.ContextError(ctx)
	if cerr == nil {
		return err
	}
	if errors.Is(err, fence.ErrBusy) {
		return fmt.Errorf("gcsguard: gave up after the context ended (%s): %w", err.Error(), cerr)
	}
	return fence.WrapContext(ctx, err)
}
