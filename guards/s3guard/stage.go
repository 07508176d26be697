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
	s       *Guard
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
	if ctx == nil {
		return nil, ErrNoStager
	}
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
//
// A nil r is refused with ErrInvalidOptions (empty content is a reader of
// no bytes, e.g. bytes.NewReader(nil), with size 0). A known size (0 or
// more) is checked: content shorter or longer than size
// is a *SizeError (ErrSizeMismatch), any data object uploaded for it is
// removed, and nothing is staged. The remaining length of an io.Seeker is
// measured before the upload (the reader is left where it was and handed
// to the client as it is); another reader is counted as the client reads
// it, and read one byte past size after the upload to see that it ends.
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
	if r == nil {
		return fmt.Errorf("%w: nil reader", ErrInvalidOptions)
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
	var sized *sizedReader
	if size >= 0 {
		n, measured, err := seekLen(r)
		switch {
		case err != nil:
			return fmt.Errorf("s3guard: stage %q: %w", st.key, err)
		case measured && n != size:
			return &SizeError{Resource: st.key, Size: size, Read: n}
		case !measured || size <= int64(st.s.inline):
			sized = &sizedReader{r: r, size: size, resource: st.key}
			r = sized
		}
	}
	if size >= 0 && size <= int64(st.s.inline) {
		b := make([]byte, size)
		if _, err := io.ReadFull(r, b); err != nil {
			return sizeOr(sized, fmt.Errorf("s3guard: stage %d bytes inline: %w", size, err))
		}
		if err := sized.end(); err != nil {
			return err
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
	if err == nil && sized != nil {
		// The client may have read exactly size bytes: see that r ends.
		if serr := sized.end(); serr != nil {
			st.s.remove(ctx, dk)
			return serr
		}
	}
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
		return sizeOr(sized, fmt.Errorf("s3guard: stage data %q: %w", dk, err))
	}
	st.ch.data = &staged{key: dk, etag: info.ETag, size: info.Size, opts: opts}
	return nil
}

// seekLen measures the bytes an io.Seeker has left from its current
// offset, and seeks back there. measured is false for a reader that is not
// an io.Seeker or cannot seek (a pipe behind an *os.File); err is set only
// when the reader could not be put back where it was.
func seekLen(r io.Reader) (n int64, measured bool, err error) {
	sk, ok := r.(io.Seeker)
	if !ok {
		return 0, false, nil
	}
	cur, cerr := sk.Seek(0, io.SeekCurrent)
	if cerr != nil {
		return 0, false, nil //nolint:nilerr // a reader that cannot seek is counted instead
	}
	end, eerr := sk.Seek(0, io.SeekEnd)
	// Put it back even when SeekEnd failed: it may have moved.
	if _, err := sk.Seek(cur, io.SeekStart); err != nil {
		return 0, false, fmt.Errorf("seek content back to %d: %w", cur, err)
	}
	return end - cur, eerr == nil, nil
}

// sizedReader passes on at most size+1 bytes of r and records a
// *SizeError when r ends before size bytes or goes on past them.
type sizedReader struct {
	r        io.Reader
	size, n  int64
	resource string
	err      *SizeError // the mismatch seen, if any
}

func (s *sizedReader) Read(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	if rem := s.size - s.n + 1; int64(len(p)) > rem {
		p = p[:rem] // at most one byte past size: enough to see more content
	}
	k, err := s.r.Read(p)
	s.n += int64(k)
	switch {
	case s.n > s.size:
		s.err = &SizeError{Resource: s.resource, Size: s.size, Read: s.n}
		return 0, s.err
	case err == io.EOF && s.n < s.size:
		s.err = &SizeError{Resource: s.resource, Size: s.size, Read: s.n}
		return k, s.err
	}
	return k, err
}

// end reads one byte past size to see that the content ends there, and
// returns the mismatch seen, if any (nil for a nil s).
func (s *sizedReader) end() error {
	if s == nil {
		return nil
	}
	if s.err == nil && s.n == s.size {
		var one [1]byte
		if _, err := io.ReadFull(s, one[:]); err != nil && err != io.EOF && s.err == nil {
			return fmt.Errorf("s3guard: stage %q: read content: %w", s.resource, err)
		}
	}
	if s.err != nil {
		return s.err
	}
	return nil
}

// sizeOr returns the mismatch s saw, if any, instead of err: the client's
// error (a short body, a request that failed) follows from it.
func sizeOr(s *sizedReader, err error) error {
	if s != nil && s.err != nil {
		return s.err
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
