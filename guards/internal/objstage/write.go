package objstage

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/internal/engine"
)

// Writer runs the fenced writes of one guard whose resource state is Cur,
// whose staged change is C (the zero C: nothing staged) and whose commit
// returns I.
type Writer[Cur, C, I any] struct {
	// Owner is handed to the callback's Stager (the guard).
	Owner any
	// Args checks a call's input (resource rules, claim, Strict's scope,
	// a live ctx) and names the guard in errors; its Rec records every
	// write.
	Args *engine.Args
	// Decide reads the resource's state (with cached, it may take it from
	// a cache of the guard's) and applies the decision rule to c.
	Decide func(ctx context.Context, resource string, c fence.Claim, cached bool) (Cur, error)
	// Commit writes ch over cur under c: the commit point.
	Commit func(ctx context.Context, resource string, c fence.Claim, writeID string, ch C, cur Cur) (I, error)
	// Discard, when set, releases what ch holds after the callback failed
	// (staged data of the guard's own).
	Discard func(ctx context.Context, ch C)
}

// Claim returns the claim ctx carries (fence.ClaimFromContext) for a call
// on resource in the context-first form; a nil ctx is refused with an
// error matching fence.ErrNilArgument. The claim is checked by Run.
func (w *Writer[Cur, C, I]) Claim(ctx context.Context, resource string) (fence.Claim, error) {
	if ctx == nil {
		return fence.Claim{}, w.Args.NilArgument(resource, "nil ctx")
	}
	c, err := fence.ClaimFromContext(ctx)
	if err != nil {
		return fence.Claim{}, fmt.Errorf("%s: %q: %w", w.Args.Name, truncate(resource), err)
	}
	return c, nil
}

// Run is one fenced write of resource under c. It refuses a nil ctx, then
// (engine.Args.Explicit) a bad resource, an invalid claim, (with Strict) a
// resource outside the claim's scope and an ended ctx before anything is
// read, recording the refusal with guardobs.Recorder.Refused; then refuses
// a nil write (fence.ErrNilArgument),
// decides, calls write with a context carrying the claim and a Stager[C],
// and commits what it staged. An error of write is returned (through
// ContextErr) and nothing is committed. Every outcome past the argument
// checks is recorded with guardobs.Recorder.Decision and ends the write's
// span. Every error passes through ContextErr: once ctx has ended, it
// matches ctx's error.
func (w *Writer[Cur, C, I]) Run(ctx context.Context, resource string, c fence.Claim, write func(ctx context.Context) error, cached bool) (_ I, err error) {
	var zero I
	if ctx == nil {
		return zero, w.Args.NilArgument(resource, "nil ctx")
	}
	if err := w.Args.Explicit(ctx, resource, c); err != nil {
		return zero, ContextErr(ctx, w.Args.Name, err)
	}
	ctx, span := w.Args.Rec.Start(ctx, resource, c)
	defer func() { span.End(err) }()
	if write == nil {
		return zero, w.Args.NilArgument(resource, "Fence with nil write")
	}
	cur, err := w.Decide(ctx, resource, c, cached)
	if err != nil {
		return zero, w.finish(ctx, err)
	}
	st := &Stager[C]{Resource: resource, Claim: c, WriteID: NewWriteID(), Owner: w.Owner}
	werr := write(context.WithValue(fence.WithClaim(ctx, c), stagerKey{}, st))
	ch := st.close()
	if werr != nil {
		if w.Discard != nil && st.staged {
			w.Discard(ctx, ch)
		}
		return zero, ContextErr(ctx, w.Args.Name, werr) // the callback's error, not a decision
	}
	info, err := w.Commit(ctx, resource, c, st.WriteID, ch, cur)
	return info, w.finish(ctx, err)
}

// finish records the outcome err of a write past the argument checks (a
// token reuse is also logged) and returns it through ContextErr.
func (w *Writer[Cur, C, I]) finish(ctx context.Context, err error) error {
	w.Args.Rec.Decision(ctx, err)
	return ContextErr(ctx, w.Args.Name, err)
}

// ContextErr is fence.WrapContext, except that an error matching
// fence.ErrBusy seen after ctx ended is replaced by the context's error:
// the retries stopped because the context ended, and a retry with the same
// context cannot succeed. prefix starts the replacement's message.
func ContextErr(ctx context.Context, prefix string, err error) error {
	if err == nil {
		return nil
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

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64]
	}
	return s
}
