package gcsguard

import (
	"bytes"
	"errors"
	"io"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/internal/objstage"
)

type readCloser struct {
	io.Reader
	io.Closer
}

// content is the Content of an engine.OpPut change: the body and the
// options of the object it stores.
type content struct {
	body *body
	opts PutOptions
}

// body is content that can be sent again on a retry.
type body struct {
	seeker   io.ReadSeeker
	start    int64
	size     int64 // declared size of seeker's content; -1: unknown
	resource string
	buf      []byte
}

// newBody keeps a seeker to stream (its size is checked while it is read),
// or reads any other reader into memory, checking its size now.
func newBody(resource string, r io.Reader, size int64) (*body, error) {
	if rs, ok := r.(io.ReadSeeker); ok {
		off, err := rs.Seek(0, io.SeekCurrent)
		if err == nil {
			return &body{seeker: rs, start: off, size: size, resource: resource}, nil
		}
	}
	b, err := readSized(resource, r, size)
	if err != nil {
		return nil, err
	}
	return &body{buf: b}, nil
}

// readSized is objstage.ReadSized with gcsguard's errors: a *fence.SizeError, and
// *bodyErrors for read errors.
func readSized(resource string, r io.Reader, size int64) ([]byte, error) {
	return objstage.ReadSized(r, size, sizeMismatch(resource), func(err error) error { return &bodyError{err: err} })
}

// sizeMismatch returns the objstage.Mismatch that reports a *fence.SizeError for
// resource.
func sizeMismatch(resource string) objstage.Mismatch {
	return func(size, read int64) error {
		return &fence.SizeError{Source: "gcsguard", Resource: resource, Size: size, Read: read}
	}
}

// length returns the content's size, or -1 when it is not known.
func (b *body) length() int64 {
	if b.seeker == nil {
		return int64(len(b.buf))
	}
	return b.size
}

func (b *body) open() (io.ReadCloser, error) {
	if b.seeker == nil {
		return io.NopCloser(bytes.NewReader(b.buf)), nil
	}
	if _, err := b.seeker.Seek(b.start, io.SeekStart); err != nil {
		return nil, &bodyError{err: err}
	}
	var r io.Reader = b.seeker
	if b.size >= 0 {
		r = &objstage.SizedReader{R: r, Size: b.size, Mismatch: sizeMismatch(b.resource)}
	}
	return io.NopCloser(&bodyReader{r: r}), nil
}

// bodyError is a failure to read the content to upload (not a store error),
// or content that does not match its declared size (a *fence.SizeError).
type bodyError struct{ err error }

func (e *bodyError) Error() string {
	var se *fence.SizeError
	if errors.As(e.err, &se) {
		return se.Error()
	}
	return "gcsguard: read content: " + e.err.Error()
}
func (e *bodyError) Unwrap() error { return e.err }

// bodyReader marks errors of the content reader as bodyErrors.
type bodyReader struct{ r io.Reader }

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		err = &bodyError{err: err}
	}
	return n, err
}
