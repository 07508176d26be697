package gcsguard

import (
	"bytes"
	"context"
	"io"

	"github.com/fencekit/fencekit/guards/internal/engine"
	"github.com/fencekit/fencekit/guards/internal/objstage"
)

// Stage provides the size bytes of r (size -1: unknown length) as the
// content that the running Guard.Fence call commits: ctx must be the
// context Fence handed its write callback. The content of r is read into
// memory now (nothing is sent until the callback returns nil); opts and
// size are checked like Put's (content of another length than a known size
// is a *fence.SizeError, and nothing is staged). One callback stages at most one
// change (fence.ErrAlreadyStaged).
func Stage(ctx context.Context, r io.Reader, size int64, opts PutOptions) error {
	return objstage.StageContent(ctx, guardName, checkOptions(opts), r, size, ErrInvalidOptions, func(st *engine.Stager) (engine.Change, error) {
		return stage(st, r, size, opts)
	})
}

// stage reads the content of a Stage call, checked, for st's call (under
// st's lock) and returns its change.
func stage(st *engine.Stager, r io.Reader, size int64, opts PutOptions) (engine.Change, error) {
	b, err := readSized(st.Resource, r, size)
	return engine.Change{Op: engine.OpPut, Content: &content{body: &body{buf: b}, opts: opts}}, err
}

// stageBytes is the engine's Bytes: fence.Stage stages value as StageBytes
// does with zero PutOptions (which, like a reader of value, pass Stage's
// checks).
func stageBytes(_ context.Context, st *engine.Stager, value []byte) (engine.Change, error) {
	return stage(st, bytes.NewReader(value), int64(len(value)), PutOptions{})
}

// StageBytes is Stage for content held in memory.
func StageBytes(ctx context.Context, b []byte, opts PutOptions) error {
	return Stage(ctx, bytes.NewReader(b), int64(len(b)), opts)
}

// StageDelete stages a tombstone (see Guard.Delete) for the running
// Guard.Fence call.
func StageDelete(ctx context.Context) error {
	return engine.Stage(ctx, guardName, engine.Change{Op: engine.OpDelete})
}
