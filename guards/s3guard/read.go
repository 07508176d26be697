package s3guard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/internal/engine"
	"github.com/fencekit/fencekit/guards/s3guard/s3client"
)

// Info describes the current state of a resource as its pointer records
// it.
type Info struct {
	Resource string
	// Token is the resource's high-water mark: the token of the accepted write
	// that stored the current pointer.
	Token fence.Token
	// Run is the run identity stored with the mark (fence.NextMark): the
	// run of the write that set it, or empty when that write had none.
	Run string
	// WriteID identifies that write (32 hex characters, unique).
	WriteID string
	// Deleted is true for a tombstone.
	Deleted bool
	// DataKey, ETag, Size, ContentType and Metadata describe the content;
	// they are empty for a tombstone. DataKey is the S3 key of the
	// immutable data object holding the bytes, ETag is that object's ETag; both are empty
	// when the content is Inline (inside the pointer, Config.InlineMax).
	Inline      bool
	DataKey     string
	ETag        string
	Size        int64
	ContentType string
	Metadata    map[string]string
}

func (s *Guard) info(key string, p *pointer) Info {
	in := Info{
		Resource: key, Token: p.Token, Run: p.Run, WriteID: p.WriteID, Deleted: p.Deleted, Inline: p.inline(),
		DataKey: p.Data, ETag: p.ETag, Size: p.Size, ContentType: p.ContentType,
	}
	if len(p.Metadata) > 0 {
		in.Metadata = make(map[string]string, len(p.Metadata))
		for k, v := range p.Metadata {
			in.Metadata[k] = v
		}
	}
	return in
}

// current is one read of a key's pointer: p is nil when there is none.
type current struct {
	p    *pointer
	etag string
	// cached: taken from the pointer cache, not read from the store.
	// partial: p lacks its inline content and metadata (cache entries).
	cached, partial bool
}

func (c current) token() fence.Token {
	if c.p == nil {
		return 0
	}
	return c.p.Token
}

func (c current) run() string {
	if c.p == nil {
		return ""
	}
	return c.p.Run
}

// readPointer GETs and decodes the pointer at key and records what it found
// in the pointer cache (forgetting the key on error).
func (s *Guard) readPointer(ctx context.Context, key string) (current, error) {
	cur, err := s.getPointer(ctx, key)
	if err != nil {
		s.cache.drop(key)
		return current{}, err
	}
	s.cache.put(key, cur)
	return cur, nil
}

func (s *Guard) getPointer(ctx context.Context, key string) (current, error) {
	// One GET: body and ETag come from the same response.
	rc, oi, err := s.client.Get(ctx, s.bucket, key, s3client.GetOptions{})
	if err != nil {
		if errors.Is(err, s3client.ErrNotFound) {
			return current{}, nil
		}
		return current{}, fmt.Errorf("s3guard: read pointer %q: %w", key, err)
	}
	defer rc.Close()
	body, err := io.ReadAll(io.LimitReader(rc, MaxPointerSize+1))
	if err != nil {
		return current{}, fmt.Errorf("s3guard: read pointer %q: %w", key, err)
	}
	p, err := decodePointer(s.prefix, key, body)
	if err != nil {
		return current{}, err
	}
	return current{p: p, etag: oi.ETag}, nil
}

// Mark returns the resource's high-water mark as a claim: the token of its
// current pointer (content or tombstone) with the run identity stored with
// it, or the zero Claim when the resource has none.
func (s *Guard) Mark(ctx context.Context, resource string) (_ fence.Claim, err error) {
	if ctx == nil {
		return fence.Claim{}, s.eng.NilArgument(resource, "nil ctx")
	}
	defer func() { err = engine.ContextErr(ctx, "s3guard", err) }()
	if err := checkResource(s.prefix, resource); err != nil {
		return fence.Claim{}, err
	}
	cur, err := s.readPointer(ctx, resource)
	if err != nil {
		return fence.Claim{}, err
	}
	return fence.Claim{Token: cur.token(), Run: cur.run()}, nil
}

// Stat returns the state of resource as its pointer records it, without
// reading the content. A resource without pointer yields
// *fence.NotFoundError; a tombstone yields its Info together with a
// *fence.NotFoundError whose Deleted is set.
func (s *Guard) Stat(ctx context.Context, resource string) (_ Info, err error) {
	if ctx == nil {
		return Info{}, s.eng.NilArgument(resource, "nil ctx")
	}
	defer func() { err = engine.ContextErr(ctx, "s3guard", err) }()
	if err := checkResource(s.prefix, resource); err != nil {
		return Info{}, err
	}
	cur, err := s.readPointer(ctx, resource)
	switch {
	case err != nil:
		return Info{}, err
	case cur.p == nil:
		return Info{}, &fence.NotFoundError{Source: "s3guard", Resource: resource}
	case cur.p.Deleted:
		return s.info(resource, cur.p), &fence.NotFoundError{Source: "s3guard", Resource: resource, Deleted: true, Token: cur.p.Token}
	}
	return s.info(resource, cur.p), nil
}

// Get returns the current content of resource, the state its pointer records
// (Info.Token is the token that wrote it) and a reader the caller must
// close. A resource without pointer or with a tombstone yields *fence.NotFoundError.
// If the data object was removed between the pointer read and the data
// read (a newer write superseded it), Get reads the pointer again.
func (s *Guard) Get(ctx context.Context, resource string) (_ io.ReadCloser, _ Info, err error) {
	if ctx == nil {
		return nil, Info{}, s.eng.NilArgument(resource, "nil ctx")
	}
	defer func() { err = engine.ContextErr(ctx, "s3guard", err) }()
	if err := checkResource(s.prefix, resource); err != nil {
		return nil, Info{}, err
	}
	var lastWrite string
	for attempt := 1; attempt <= s.max; attempt++ {
		cur, err := s.readPointer(ctx, resource)
		if err != nil {
			return nil, Info{}, err
		}
		if cur.p == nil {
			return nil, Info{}, &fence.NotFoundError{Source: "s3guard", Resource: resource}
		}
		if cur.p.Deleted {
			return nil, s.info(resource, cur.p), &fence.NotFoundError{Source: "s3guard", Resource: resource, Deleted: true, Token: cur.p.Token}
		}
		if cur.p.inline() {
			return io.NopCloser(bytes.NewReader(cur.p.Inline)), s.info(resource, cur.p), nil
		}
		if s.beforeData != nil {
			s.beforeData(resource)
		}
		// One GET: once it has answered, the body streams even if the data
		// object is removed meanwhile.
		rc, _, err := s.client.Get(ctx, s.bucket, cur.p.Data, s3client.GetOptions{IfMatch: cur.p.ETag})
		if err == nil {
			return rc, s.info(resource, cur.p), nil
		}
		switch {
		case errors.Is(err, s3client.ErrNotFound):
			if cur.p.WriteID == lastWrite {
				return nil, Info{}, &DataError{Resource: resource, DataKey: cur.p.Data, Reason: "is missing"}
			}
			lastWrite = cur.p.WriteID // superseded meanwhile? read the pointer again
		case errors.Is(err, s3client.ErrPreconditionFailed):
			return nil, Info{}, &DataError{Resource: resource, DataKey: cur.p.Data, Reason: "no longer has ETag " + cur.p.ETag}
		default:
			return nil, Info{}, fmt.Errorf("s3guard: read data %q: %w", cur.p.Data, err)
		}
	}
	return nil, Info{}, fmt.Errorf("s3guard: %q: content kept moving during %d reads: %w", resource, s.max, fence.ErrBusy)
}

// GetBytes is Get reading the whole content into memory.
func (s *Guard) GetBytes(ctx context.Context, resource string) (_ []byte, _ Info, err error) {
	if ctx == nil {
		return nil, Info{}, s.eng.NilArgument(resource, "nil ctx")
	}
	defer func() { err = engine.ContextErr(ctx, "s3guard", err) }()
	rc, info, err := s.Get(ctx, resource)
	if err != nil {
		return nil, info, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, Info{}, fmt.Errorf("s3guard: read data %q: %w", info.DataKey, err)
	}
	return b, info, nil
}
