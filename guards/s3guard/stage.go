package s3guard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/s3guard/s3client"
)

type stagerKey struct{}

// stager collects what one Fence write stages.
type stager struct {
	s       *Store
	key     string
	claim   fence.Claim
	writeID string

	mu     sync.Mutex
	closed bool
	ch     change
}

// change is what a Fence write commits: new content, a tombstone, or
// (neither) the current content re-stamped with the new token.
type change struct {
	data    *staged
	deleted bool
}

// staged is content uploaded to data object key, or (key "") held inline.
type staged struct {
	key    string
	etag   string
	size   int64
	opts   PutOptions
	inline []byte
}

func (st *stager) close() change {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.closed = true
	return st.ch
}

func stagerFrom(ctx context.Context) (*stager, error) {
	st, ok := ctx.Value(stagerKey{}).(*stager)
	if !ok {
		return nil, ErrNoStager
	}
	return st, nil
}

// Stage uploads size bytes from r (size -1: unknown length, multipart) as the
// new content of the key that the running Fence call guards. ctx must be (or
// derive from) the context Fence passed to its write callback. The bytes go
// to a fresh, immutable data object created with If-None-Match: *; they
// become visible only when Fence's conditional pointer write succeeds after
// write returns nil. Each write stages at most one change (ErrAlreadyStaged).
func Stage(ctx context.Context, r io.Reader, size int64, opts PutOptions) error {
	st, err := stagerFrom(ctx)
	if err != nil {
		return err
	}
	if err := checkOptions(opts); err != nil {
		return err
	}
	if size < -1 {
		return fmt.Errorf("%w: size %d", ErrInvalidOptions, size)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case st.closed:
		return ErrStageClosed
	case st.ch.data != nil || st.ch.deleted:
		return ErrAlreadyStaged
	}
	meta := opts.Metadata
	if len(meta) > 0 {
		meta = make(map[string]string, len(opts.Metadata))
		for k, v := range opts.Metadata {
			meta[k] = v
		}
	}
	opts.Metadata = meta
	if size >= 0 && size <= int64(st.s.inline) {
		b := make([]byte, size)
		if _, err := io.ReadFull(r, b); err != nil {
			return fmt.Errorf("s3guard: stage %d bytes inline: %w", size, err)
		}
		st.ch.data = &staged{size: size, opts: opts, inline: b}
		return nil
	}
	dk := dataKey(st.s.prefix, st.key, st.claim.Token, st.writeID)
	po := s3client.PutOptions{
		ContentType: opts.ContentType,
		Metadata:    writeMetadata(st.claim.Token, st.claim.Run, st.writeID),
		IfNoneMatch: true,
	}
	info, err := st.s.client.Put(ctx, st.s.bucket, dk, r, size, po)
	if errors.Is(err, s3client.ErrPreconditionFailed) {
		// The key embeds our random write id, so whatever is there is ours:
		// an earlier attempt landed, its reply was lost and the SDK retried.
		oi, serr := st.s.client.Head(ctx, st.s.bucket, dk)
		if serr == nil && oi.Metadata[metaWriteID] == st.writeID {
			info, err = oi, nil
		}
	}
	if err != nil {
		// The upload may have landed; it is unreferenced either way.
		st.s.remove(ctx, dk)
		return fmt.Errorf("s3guard: stage data %q: %w", dk, err)
	}
	st.ch.data = &staged{key: dk, etag: info.ETag, size: info.Size, opts: opts}
	return nil
}

// User metadata of pointers and data objects (x-amz-meta-*, lower case as
// s3client reports them): informative for HEAD-based tooling, never read by
// the guard except to recognise its own data object after a lost reply.
const (
	metaToken   = "fencekit-token"
	metaRun     = "fencekit-run"
	metaWriteID = "fencekit-write-id"
)

func writeMetadata(token fence.Token, run, writeID string) map[string]string {
	m := map[string]string{metaToken: token.String(), metaWriteID: writeID}
	if run != "" {
		m[metaRun] = run
	}
	return m
}

// StageDelete makes the running Fence call commit a tombstone instead of
// content. ctx must come from Fence's write callback. It does no I/O.
func StageDelete(ctx context.Context) error {
	st, err := stagerFrom(ctx)
	if err != nil {
		return err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case st.closed:
		return ErrStageClosed
	case st.ch.data != nil || st.ch.deleted:
		return ErrAlreadyStaged
	}
	st.ch.deleted = true
	return nil
}
