// Package stagectx carries the staging of a running Fence or Do callback
// in the callback's context, for fence.Stage and fence.StageDelete:
// package fence cannot import the guards' engine (guards/internal/engine),
// which imports fence, so the two meet here. The engine installs each
// callback's Stager with With; a guard that does not stage hides an
// enclosing callback's with With(ctx, nil).
//
// It is internal to fencekit: package fence documents the behaviour users
// rely on.
package stagectx

import "context"

// Stager stages the change of one running Fence or Do callback. Its
// methods return fence's staging errors (fence.ErrAlreadyStaged,
// fence.ErrStageClosed) or the guard's own.
type Stager interface {
	// StageBytes stages value as the resource's new value; ctx is the
	// context fence.Stage was given (for a guard that does I/O to stage).
	StageBytes(ctx context.Context, value []byte) error
	// StageDelete stages the deletion of the resource's value.
	StageDelete() error
}

type key struct{}

// With returns a copy of ctx that carries s, hiding the Stager of any
// enclosing callback; a nil s hides it and carries none.
func With(ctx context.Context, s Stager) context.Context {
	return context.WithValue(ctx, key{}, s)
}

// From returns the Stager ctx carries; ok is false when it carries none
// (ctx nil too).
func From(ctx context.Context) (s Stager, ok bool) {
	if ctx == nil {
		return nil, false
	}
	s, ok = ctx.Value(key{}).(Stager)
	return s, ok && s != nil
}
