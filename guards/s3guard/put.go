package s3guard

import (
	"bytes"
	"context"
	"io"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/internal/engine"
	"github.com/fencekit/fencekit/guards/internal/objstage"
)

// PutOptions describe staged content.
type PutOptions struct {
	// ContentType is stored in the pointer and on the data object.
	// At most 256 printable ASCII bytes.
	ContentType string
	// Metadata is stored in the pointer body only (not as x-amz-meta-*
	// headers). Keys: 1..128 of [A-Za-z0-9-_]; values: UTF-8 without
	// control characters; MaxMetadataSize bytes in total.
	Metadata map[string]string
}

// The fenced writes (Put, PutBytes, Delete, Do) present the claim that ctx
// carries: a lease context's token and run identity, or one set with
// fence.WithClaim or fence.WithToken for a claim from another source. A
// ctx without a claim is refused with an error matching fence.ErrNoToken
// and nothing is read or written. Fence (fence.Guard) takes a token and
// presents fence.ClaimFor(ctx, token): the token, with ctx's run identity
// when ctx's claim is for the same token.

// Put stores size bytes from r at resource under the claim ctx carries. size may
// be -1 for a stream of unknown length (multipart upload). It is Do with a
// write that calls Stage; on success it returns the new state. A known size
// is checked (see Stage): content shorter or longer is a *fence.SizeError
// (fence.ErrSizeMismatch) and nothing is written.
//
// A stale token yields *fence.StaleError and uploads nothing when the
// staleness is visible before the upload; a token that becomes stale while
// the upload runs, or whose staleness the Guard's pointer cache did not yet
// know (another Guard raised the mark since this one last saw the resource),
// yields *fence.StaleError and the upload is removed. A token equal to the
// mark but presented by another run than the one that set it yields
// *fence.ReusedError.
func (s *Guard) Put(ctx context.Context, resource string, r io.Reader, size int64, opts PutOptions) (Info, error) {
	return s.put(ctx, resource, nil, r, size, opts)
}

// PutBytes is Put for content held in memory.
func (s *Guard) PutBytes(ctx context.Context, resource string, b []byte, opts PutOptions) (Info, error) {
	return s.Put(ctx, resource, bytes.NewReader(b), int64(len(b)), opts)
}

// Delete stores a tombstone at resource under the claim ctx carries: a fenced
// write through the same conditional path as Put (never a conditional
// DeleteObject, which MinIO does not honour). Afterwards Get reports
// *fence.NotFoundError with Deleted and Token set, and writes below the token are
// refused. Deleting a resource that has no content still writes the tombstone,
// raising the mark.
func (s *Guard) Delete(ctx context.Context, resource string) (Info, error) {
	return s.write(ctx, resource, nil, engine.ReadAny, StageDelete)
}

// Do runs write as a fenced write of the object at resource under the claim ctx
// carries, exactly as Fence does under an explicit token.
func (s *Guard) Do(ctx context.Context, resource string, write func(ctx context.Context) error) error {
	_, err := s.write(ctx, resource, nil, engine.ReadFresh, write)
	return err
}

// Fence implements fence.Guard for the object at resource, under
// fence.ClaimFor(ctx, token).
//
// It reads the pointer (Fence never decides on the pointer cache, since
// write may have effects of its own) and refuses a stale token
// (*fence.StaleError) or a reused one (*fence.ReusedError) without calling
// write. Otherwise it calls write with a context that carries the claim
// (fence.ClaimFromContext) and a stager: write may call Stage to upload new
// content or StageDelete to stage a tombstone. Staged data is stored under a
// fresh data key and stays invisible to Get until the conditional pointer
// write after write returns nil succeeds; that write is the commit point. If
// write stages nothing, the commit re-stamps the current content (or a
// tombstone, if there is none) with the token, so the mark is raised all the
// same.
//
// When write fails, its error is returned, the mark is unchanged and staged
// data is removed. A nil write yields an error matching
// fence.ErrNilArgument (after the resource and token checks) and does
// nothing. Once ctx has ended, every error matches ctx.Err() and
// context.Cause(ctx), and never fence.ErrBusy. A commit whose pointer PUT
// was sent without an answer is settled by a read (see the package
// documentation): success when it landed, otherwise a
// *fence.OutcomeUnknownError.
func (s *Guard) Fence(ctx context.Context, resource string, token fence.Token, write func(ctx context.Context) error) error {
	if ctx == nil {
		return s.eng.NilArgument(resource, "nil ctx")
	}
	c := fence.ClaimFor(ctx, token)
	_, err := s.write(ctx, resource, &c, engine.ReadFresh, write)
	return err
}

func (s *Guard) put(ctx context.Context, key string, c *fence.Claim, r io.Reader, size int64, opts PutOptions) (Info, error) {
	if err := checkOptions(opts); err != nil {
		return Info{}, err
	}
	if size < -1 {
		return Info{}, objstage.CheckBody(r, size, ErrInvalidOptions)
	}
	return s.write(ctx, key, c, engine.ReadAny, func(ctx context.Context) error {
		return Stage(ctx, r, size, opts)
	})
}
