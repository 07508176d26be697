package s3guard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/internal/engine"
	"github.com/fencekit/fencekit/guards/internal/objstage"
	"github.com/fencekit/fencekit/guards/s3guard/s3client"
)

// staged is the Content of an engine.OpPut change: content uploaded to
// data object key, or (key "") held inline.
type staged struct {
	key    string
	etag   string
	size   int64
	opts   PutOptions
	inline []byte
}

// Stage uploads size bytes from r (size -1: unknown length, multipart) as the
// new content of the key that the running Fence call guards. ctx must be (or
// derive from) the context Fence passed to its write callback. The bytes go
// to a fresh, immutable data object created with If-None-Match: *; they
// become visible only when Fence's conditional pointer write succeeds after
// write returns nil. Each write stages at most one change
// (fence.ErrAlreadyStaged).
//
// A nil r is refused with ErrInvalidOptions (empty content is a reader of
// no bytes, e.g. bytes.NewReader(nil), with size 0). A known size (0 or
// more) is checked: content shorter or longer than size
// is a *fence.SizeError (fence.ErrSizeMismatch), any data object uploaded for it is
// removed, and nothing is staged. The remaining length of an io.Seeker is
// measured before the upload (the reader is left where it was and handed
// to the client as it is); another reader is counted as the client reads
// it, and read one byte past size after the upload to see that it ends.
func Stage(ctx context.Context, r io.Reader, size int64, opts PutOptions) error {
	return objstage.StageContent(ctx, guardName, checkOptions(opts), r, size, ErrInvalidOptions, func(st *engine.Stager) (engine.Change, error) {
		return stage(ctx, st, r, size, opts)
	})
}

// stage uploads the content of a Stage call, checked, for st's call
// (under st's lock) and returns its change.
func stage(ctx context.Context, st *engine.Stager, r io.Reader, size int64, opts PutOptions) (engine.Change, error) {
	w := st.Driver.(*call)
	d, err := w.s.upload(ctx, st, r, size, opts)
	w.staged = d
	return engine.Change{Op: engine.OpPut, Content: d}, err
}

// stageBytes is the engine's Bytes: fence.Stage stages value as StageBytes
// does with zero PutOptions (which, like a reader of value, pass Stage's
// checks).
func stageBytes(ctx context.Context, st *engine.Stager, value []byte) (engine.Change, error) {
	return stage(ctx, st, bytes.NewReader(value), int64(len(value)), PutOptions{})
}

// StageBytes is Stage for content held in memory.
func StageBytes(ctx context.Context, b []byte, opts PutOptions) error {
	return Stage(ctx, bytes.NewReader(b), int64(len(b)), opts)
}

// upload stores the content of one Stage call: inline, or in a fresh data
// object named by the claim's token and the write id of the call's first
// pointer PUT.
func (s *Guard) upload(ctx context.Context, st *engine.Stager, r io.Reader, size int64, opts PutOptions) (*staged, error) {
	key := st.Resource
	if len(opts.Metadata) > 0 {
		opts.Metadata = maps.Clone(opts.Metadata)
	}
	var sized *objstage.SizedReader
	if size >= 0 {
		n, measured, err := objstage.SeekLen(r)
		switch {
		case err != nil:
			return nil, fmt.Errorf("s3guard: stage %q: %w", key, err)
		case measured && n != size:
			return nil, &fence.SizeError{Source: "s3guard", Resource: key, Size: size, Read: n}
		case !measured || size <= int64(s.inline):
			sized = &objstage.SizedReader{R: r, Size: size, Mismatch: func(size, read int64) error {
				return &fence.SizeError{Source: "s3guard", Resource: key, Size: size, Read: read}
			}}
			r = sized
		}
	}
	if size >= 0 && size <= int64(s.inline) {
		b := make([]byte, size)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, sizeOr(sized, fmt.Errorf("s3guard: stage %d bytes inline: %w", size, err))
		}
		if err := sizedEnd(key, sized); err != nil {
			return nil, err
		}
		return &staged{size: size, opts: opts, inline: b}, nil
	}
	dk := dataKey(s.prefix, key, st.Claim.Token, st.WriteID)
	po := s3client.PutOptions{
		ContentType: opts.ContentType,
		Metadata:    writeMetadata(st.Claim.Token, st.Claim.Run, st.WriteID),
		IfNoneMatch: true,
	}
	info, err := s.client.Put(ctx, s.bucket, dk, r, size, po)
	if err == nil && sized != nil {
		// The client may have read exactly size bytes: see that r ends.
		if serr := sizedEnd(key, sized); serr != nil {
			s.remove(ctx, dk)
			return nil, serr
		}
	}
	if errors.Is(err, s3client.ErrPreconditionFailed) {
		// The key embeds our random write id, so whatever is there is ours:
		// an earlier attempt landed, its reply was lost and the SDK retried.
		oi, serr := s.client.Head(ctx, s.bucket, dk)
		if serr == nil && oi.Metadata[metaWriteID] == st.WriteID {
			info, err = oi, nil
		}
	}
	if err != nil {
		// The upload may have landed; it is unreferenced either way.
		s.remove(ctx, dk)
		return nil, sizeOr(sized, fmt.Errorf("s3guard: stage data %q: %w", dk, err))
	}
	return &staged{key: dk, etag: info.ETag, size: info.Size, opts: opts}, nil
}

// sizedEnd is sized.End with a read error named as the content's.
func sizedEnd(key string, sized *objstage.SizedReader) error {
	err := sized.End()
	if err != nil && sized.Err() == nil {
		return fmt.Errorf("s3guard: stage %q: read content: %w", key, err)
	}
	return err
}

// sizeOr returns the mismatch s saw, if any, instead of err: the client's
// error (a short body, a request that failed) follows from it.
func sizeOr(s *objstage.SizedReader, err error) error {
	if serr := s.Err(); serr != nil {
		return serr
	}
	return err
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
	return engine.Stage(ctx, guardName, engine.Change{Op: engine.OpDelete})
}
