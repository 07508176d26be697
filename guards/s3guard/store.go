package s3guard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"go.opentelemetry.io/otel/metric"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/obs"
)

// DefaultDataPrefix is the Config.DataPrefix used when none is set.
const DefaultDataPrefix = "_fencekit/data/"

// DefaultMaxAttempts is the Config.MaxAttempts used when none is set.
const DefaultMaxAttempts = 8

// DefaultConflictBackoff is the Config.ConflictBackoff used when none is set.
const DefaultConflictBackoff = 20 * time.Millisecond

// cleanupTimeout bounds each best-effort removal of an unreferenced data
// object.
const cleanupTimeout = 10 * time.Second

// Config configures a Store. Client and Bucket are required.
type Config struct {
	// Client talks to S3 or MinIO. Required.
	Client *minio.Client
	// Bucket holds the pointers and the data objects. Required; it must
	// exist.
	Bucket string
	// DataPrefix is the key prefix of data objects, ending in "/".
	// Default DefaultDataPrefix. Keys under it are refused as user keys.
	// Changing it makes existing pointers unreadable (*PointerError).
	DataPrefix string
	// MaxAttempts bounds the conditional pointer writes of one call (and
	// the pointer re-reads of one Get). When every attempt loses a race
	// that is worth retrying, the call fails with an error matching
	// fence.ErrBusy. A write that failed only because the pointer cache
	// was stale does not count. Default DefaultMaxAttempts.
	MaxAttempts int
	// ConflictBackoff is the base wait before retrying after a 409
	// ConditionalRequestConflict (AWS); the n-th wait is n times it.
	// Default DefaultConflictBackoff.
	ConflictBackoff time.Duration
	// KeepSuperseded leaves the data object of a superseded write in
	// place instead of removing it right after the new pointer is
	// written. Sweep removes such objects later.
	KeepSuperseded bool
	// InlineMax, when positive, stores content of known size up to
	// InlineMax bytes inside the pointer body (base64, field "inline")
	// instead of in a data object: one conditional PUT per write and one
	// GET per read. At most MaxInline. Default 0: content always goes to a
	// data object.
	InlineMax int
	// PointerCacheSize bounds the Store's pointer cache: for that many
	// keys (least recently used out first) the Store remembers the last
	// pointer it read or wrote, so that Put and Delete can skip the
	// pointer GET. The cached pointer is only a hint: the write decides
	// against it and commits with If-Match on its ETag, so a pointer
	// written meanwhile by anyone else fails that PUT (412 or 404), and
	// the Store re-reads and continues as without a cache. A refusal
	// decided on the cache is confirmed by a read before it is returned.
	// An entry holds no content (inline bytes and metadata are left out):
	// a few hundred bytes plus the key. Default DefaultPointerCacheSize;
	// negative disables the cache (every write GETs the pointer first).
	PointerCacheSize int
	// MeterProvider records fencekit.guard.accepted (committed fenced
	// writes), fencekit.guard.stale, fencekit.guard.token_gap and
	// fencekit.guard.s3.retries (conditional pointer writes retried after a
	// 412/404/409, including the retry after a stale pointer cache entry)
	// with guard="s3" (see docs/operations.md). Nil records nothing.
	MeterProvider metric.MeterProvider
}

// Store is a fenced object store over one bucket. It is safe for concurrent
// use, also together with other Stores (in other processes) over the same
// bucket.
type Store struct {
	client  *minio.Client
	bucket  string
	prefix  string
	max     int
	backoff time.Duration
	keep    bool
	inline  int
	cache   *pointerCache // nil: disabled
	met     *obs.Guard

	// afterRead, when set (tests only), runs after every pointer read or
	// pointer cache hit of the fenced write path, before the decision.
	afterRead func(key string)
	// beforeData, when set (tests only), runs in Get between the pointer
	// read and the data read.
	beforeData func(key string)
}

var _ fence.Guard = (*Store)(nil)

// New validates cfg, fills defaults and returns a Store. It does no I/O.
func New(cfg Config) (*Store, error) {
	if cfg.Client == nil {
		return nil, fmt.Errorf("%w: Client is nil", ErrInvalidConfig)
	}
	if cfg.Bucket == "" {
		return nil, fmt.Errorf("%w: Bucket is empty", ErrInvalidConfig)
	}
	if cfg.DataPrefix == "" {
		cfg.DataPrefix = DefaultDataPrefix
	}
	if !strings.HasSuffix(cfg.DataPrefix, "/") {
		return nil, fmt.Errorf("%w: DataPrefix %q must end in '/'", ErrInvalidConfig, cfg.DataPrefix)
	}
	var ke *KeyError
	if err := checkKey("\x00", strings.TrimSuffix(cfg.DataPrefix, "/")); errors.As(err, &ke) {
		return nil, fmt.Errorf("%w: DataPrefix %q: %s", ErrInvalidConfig, cfg.DataPrefix, ke.Reason)
	}
	if len(cfg.DataPrefix)+MaxKeyLen+dataSuffixLen > maxS3KeyLen {
		return nil, fmt.Errorf("%w: DataPrefix longer than %d bytes", ErrInvalidConfig, maxS3KeyLen-MaxKeyLen-dataSuffixLen)
	}
	switch {
	case cfg.MaxAttempts < 0:
		return nil, fmt.Errorf("%w: MaxAttempts %d is negative", ErrInvalidConfig, cfg.MaxAttempts)
	case cfg.MaxAttempts == 0:
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	if cfg.InlineMax < 0 || cfg.InlineMax > MaxInline {
		return nil, fmt.Errorf("%w: InlineMax %d outside 0..%d", ErrInvalidConfig, cfg.InlineMax, MaxInline)
	}
	switch {
	case cfg.ConflictBackoff < 0:
		return nil, fmt.Errorf("%w: ConflictBackoff %v is negative", ErrInvalidConfig, cfg.ConflictBackoff)
	case cfg.ConflictBackoff == 0:
		cfg.ConflictBackoff = DefaultConflictBackoff
	}
	switch {
	case cfg.PointerCacheSize < 0:
		cfg.PointerCacheSize = 0
	case cfg.PointerCacheSize == 0:
		cfg.PointerCacheSize = DefaultPointerCacheSize
	}
	met, err := obs.NewGuard(cfg.MeterProvider, obs.KindS3)
	if err != nil {
		return nil, fmt.Errorf("%w: MeterProvider: %w", ErrInvalidConfig, err)
	}
	return &Store{
		met:     met,
		cache:   newPointerCache(cfg.PointerCacheSize),
		client:  cfg.Client,
		bucket:  cfg.Bucket,
		prefix:  cfg.DataPrefix,
		max:     cfg.MaxAttempts,
		backoff: cfg.ConflictBackoff,
		keep:    cfg.KeepSuperseded,
		inline:  cfg.InlineMax,
	}, nil
}

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

// Info describes the current state of a key as a pointer records it.
type Info struct {
	Key string
	// Token is the key's high-water mark: the token of the accepted write
	// that stored the current pointer.
	Token fence.Token
	// WriteID identifies that write (32 hex characters, unique).
	WriteID string
	// Deleted is true for a tombstone.
	Deleted bool
	// DataKey, ETag, Size, ContentType and Metadata describe the content;
	// they are empty for a tombstone. DataKey names the immutable data
	// object holding the bytes, ETag is that object's ETag; both are empty
	// when the content is Inline (inside the pointer, Config.InlineMax).
	Inline      bool
	DataKey     string
	ETag        string
	Size        int64
	ContentType string
	Metadata    map[string]string
}

func (s *Store) info(key string, p *pointer) Info {
	in := Info{
		Key: key, Token: p.Token, WriteID: p.WriteID, Deleted: p.Deleted, Inline: p.inline(),
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

func errCode(err error) (string, int) {
	var er minio.ErrorResponse
	if errors.As(err, &er) {
		return er.Code, er.StatusCode
	}
	return "", 0
}

func isNoSuchKey(err error) bool {
	code, status := errCode(err)
	return code == "NoSuchKey" || (code == "" && status == http.StatusNotFound)
}

// readPointer GETs and decodes the pointer at key and records what it found
// in the pointer cache (forgetting the key on error).
func (s *Store) readPointer(ctx context.Context, key string) (current, error) {
	cur, err := s.getPointer(ctx, key)
	if err != nil {
		s.cache.drop(key)
		return current{}, err
	}
	s.cache.put(key, cur)
	return cur, nil
}

func (s *Store) getPointer(ctx context.Context, key string) (current, error) {
	// Core.GetObject is one GET: body and ETag come from the same response.
	rc, oi, _, err := minio.Core{Client: s.client}.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		if isNoSuchKey(err) {
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

// Mark returns the key's high-water mark: the token of its current pointer
// (content or tombstone), or 0 when the key has none.
func (s *Store) Mark(ctx context.Context, key string) (fence.Token, error) {
	if err := checkKey(s.prefix, key); err != nil {
		return 0, err
	}
	cur, err := s.readPointer(ctx, key)
	if err != nil {
		return 0, err
	}
	return cur.token(), nil
}

// Put stores size bytes from r at key under token. size may be -1 for a
// stream of unknown length (multipart upload). It is Fence with a write
// that calls Stage; on success it returns the new state.
//
// A stale token yields *fence.StaleError and uploads nothing when the
// staleness is visible before the upload; a token that becomes stale while
// the upload runs, or whose staleness the Store's pointer cache did not yet
// know (another Store raised the mark since this one last saw the key),
// yields *fence.StaleError and the upload is removed.
func (s *Store) Put(ctx context.Context, key string, token fence.Token, r io.Reader, size int64, opts PutOptions) (Info, error) {
	if err := checkOptions(opts); err != nil {
		return Info{}, err
	}
	if size < -1 {
		return Info{}, fmt.Errorf("%w: size %d", ErrInvalidOptions, size)
	}
	return s.fence(ctx, key, token, func(ctx context.Context) error {
		return Stage(ctx, r, size, opts)
	}, true)
}

// PutBytes is Put for content held in memory.
func (s *Store) PutBytes(ctx context.Context, key string, token fence.Token, b []byte, opts PutOptions) (Info, error) {
	return s.Put(ctx, key, token, bytes.NewReader(b), int64(len(b)), opts)
}

// Delete stores a tombstone at key under token: a fenced write through the
// same conditional path as Put (never a conditional DeleteObject, which
// MinIO does not honour). Afterwards Get reports *NotFoundError with
// Deleted and Token set, and writes below token are refused. Deleting a key
// that has no content still writes the tombstone, raising the mark.
func (s *Store) Delete(ctx context.Context, key string, token fence.Token) (Info, error) {
	return s.fence(ctx, key, token, StageDelete, true)
}

// Fence implements fence.Guard for the object at key resource.
//
// It reads the pointer (Fence never decides on the pointer cache, since
// write may have effects of its own) and refuses a stale token
// (*fence.StaleError) without calling write. Otherwise it calls write with a
// context that carries token (fence.FromContext) and a stager: write may call Stage to
// upload new content or StageDelete to stage a tombstone. Staged data is
// stored under a fresh data key and stays invisible to Get until the
// conditional pointer write after write returns nil succeeds; that write is
// the commit point. If write stages nothing, the commit re-stamps the
// current content (or a tombstone, if there is none) with token, so the mark
// is raised all the same.
//
// When write fails, its error is returned, the mark is unchanged and staged
// data is removed. A nil write yields ErrNilWrite (after the key and token
// checks) and does nothing.
func (s *Store) Fence(ctx context.Context, resource string, token fence.Token, write func(ctx context.Context) error) error {
	if write == nil {
		if err := checkKey(s.prefix, resource); err != nil {
			return err
		}
		if err := token.Validate(); err != nil {
			return err
		}
		return ErrNilWrite
	}
	_, err := s.fence(ctx, resource, token, write, false)
	return err
}

// fence runs a fenced write. With useCache, a cached pointer stands in for
// the pointer GET (Put and Delete: their write only stages).
func (s *Store) fence(ctx context.Context, key string, token fence.Token, write func(ctx context.Context) error, useCache bool) (_ Info, err error) {
	defer func() { s.met.Decision(ctx, err) }() // counts commits and stale refusals only
	if err := checkKey(s.prefix, key); err != nil {
		return Info{}, err
	}
	if err := token.Validate(); err != nil {
		return Info{}, err
	}
	var cur current
	hit := false
	if useCache {
		cur, hit = s.cache.get(key)
	}
	if !hit {
		var err error
		if cur, err = s.readPointer(ctx, key); err != nil {
			return Info{}, err
		}
	}
	if s.afterRead != nil {
		s.afterRead(key)
	}
	if err := fence.Decide(key, token, cur.token()); err != nil {
		if !cur.cached {
			return Info{}, err
		}
		// Refusing on the cache alone would be safe (a mark only rises, so
		// the real one is at least the cached one), but the real mark may
		// be higher (StaleError.Highest) or have been erased outside the
		// guard: confirm with a read. Only refusals pay for it.
		if cur, err = s.readPointer(ctx, key); err != nil {
			return Info{}, err
		}
		if s.afterRead != nil {
			s.afterRead(key)
		}
		if err := fence.Decide(key, token, cur.token()); err != nil {
			return Info{}, err
		}
	}
	st := &stager{s: s, key: key, token: token, writeID: newWriteID()}
	werr := write(context.WithValue(fence.WithToken(ctx, token), stagerKey{}, st))
	ch := st.close()
	if werr != nil {
		if ch.data != nil && ch.data.key != "" {
			s.remove(ctx, ch.data.key)
		}
		return Info{}, werr
	}
	return s.commit(ctx, key, token, st.writeID, ch, cur)
}

// next builds the pointer that commits ch over cur.
func (ch change) next(token fence.Token, writeID string, cur current) *pointer {
	p := &pointer{Format: PointerFormat, Token: token, WriteID: writeID}
	switch {
	case ch.data != nil:
		d := ch.data
		p.Data, p.ETag, p.Size, p.ContentType, p.Metadata = d.key, d.etag, d.size, d.opts.ContentType, d.opts.Metadata
		p.Inline = d.inline
	case ch.deleted || cur.p == nil || cur.p.Deleted:
		p.Deleted = true
	default: // nothing staged: keep the current content
		c := cur.p
		p.Data, p.ETag, p.Size, p.ContentType, p.Metadata = c.Data, c.ETag, c.Size, c.ContentType, c.Metadata
		p.Inline = c.Inline
	}
	return p
}

// keeps reports whether ch re-stamps the current content.
func (ch change) keeps() bool { return ch.data == nil && !ch.deleted }

// commit runs the conditional pointer write loop. cur may come from the
// pointer cache: then a 412 or 404 only means the cache was stale, and that
// first failed write does not count against MaxAttempts.
func (s *Store) commit(ctx context.Context, key string, token fence.Token, writeID string, ch change, cur current) (Info, error) {
	var conflicts, lost int
	for {
		if ch.keeps() && cur.partial {
			// A cache entry lacks the inline content and metadata that
			// re-stamping copies: read the full pointer. Nothing is staged.
			var err error
			if cur, err = s.readPointer(ctx, key); err != nil {
				return Info{}, err
			}
			if s.afterRead != nil {
				s.afterRead(key)
			}
			if err := fence.Decide(key, token, cur.token()); err != nil {
				return Info{}, err
			}
		}
		next := ch.next(token, writeID, cur)
		body, err := next.encode()
		if err != nil {
			return Info{}, fmt.Errorf("s3guard: encode pointer: %w", err)
		}
		opts := minio.PutObjectOptions{
			ContentType: PointerContentType,
			UserMetadata: map[string]string{
				"Fencekit-Token":    token.String(),
				"Fencekit-Write-Id": writeID,
			},
		}
		if cur.p == nil {
			opts.SetMatchETagExcept("*")
		} else {
			opts.SetMatchETag(cur.etag)
		}
		ui, err := s.client.PutObject(ctx, s.bucket, key, bytes.NewReader(body), int64(len(body)), opts)
		if err == nil {
			s.cache.put(key, current{p: next, etag: ui.ETag})
			s.dropSuperseded(ctx, cur, next)
			return s.info(key, next), nil
		}
		code, status := errCode(err)
		switch {
		case code == "PreconditionFailed" || status == http.StatusPreconditionFailed:
			// Someone else's write, or our own earlier attempt whose reply
			// was lost and that the SDK retried: the re-read tells.
		case isNoSuchKey(err):
			// If-Match on a pointer that was removed meanwhile.
		case code == "ConditionalRequestConflict" || status == http.StatusConflict:
			conflicts++
			if err := wait(ctx, time.Duration(conflicts)*s.backoff); err != nil {
				return Info{}, err
			}
		default:
			// Outcome unknown: the pointer may have landed (or still land).
			// Confirm if we can; never remove the staged data here.
			s.cache.drop(key)
			if c, rerr := s.readPointer(ctx, key); rerr == nil && c.p != nil && c.p.WriteID == writeID {
				s.dropSuperseded(ctx, cur, c.p)
				return s.info(key, c.p), nil
			}
			return Info{}, fmt.Errorf("s3guard: write pointer %q (write id %s), outcome unknown: %w", key, writeID, err)
		}
		prev := cur
		if cur, err = s.readPointer(ctx, key); err != nil {
			return Info{}, err
		}
		if cur.p != nil && cur.p.WriteID == writeID {
			// Our attempt landed; the reply was lost.
			s.dropSuperseded(ctx, prev, cur.p)
			return s.info(key, cur.p), nil
		}
		if s.afterRead != nil {
			s.afterRead(key)
		}
		if err := fence.Decide(key, token, cur.token()); err != nil {
			s.dropUnreferenced(ctx, ch, cur)
			return Info{}, err
		}
		if !prev.cached {
			lost++
		}
		if lost >= s.max {
			s.dropUnreferenced(ctx, ch, cur)
			return Info{}, fmt.Errorf("s3guard: %q: %d conditional pointer writes lost races: %w", key, lost, fence.ErrBusy)
		}
		s.met.Retried(ctx, 1)
	}
}

// dropSuperseded removes the data object of the pointer old that new
// replaced, unless new still refers to it or the Store keeps them.
func (s *Store) dropSuperseded(ctx context.Context, old current, new *pointer) {
	if s.keep || old.p == nil || old.p.Data == "" || old.p.Data == new.Data {
		return
	}
	s.remove(ctx, old.p.Data)
}

// dropUnreferenced removes our staged data after a refused or abandoned
// commit, unless the current pointer refers to it (an earlier attempt of
// ours landed, its reply was lost, and a content-keeping write copied the
// reference). Once the current pointer does not refer to a data object, no
// later pointer can: references are only copied from the current pointer.
func (s *Store) dropUnreferenced(ctx context.Context, ch change, cur current) {
	if ch.data == nil || ch.data.key == "" || (cur.p != nil && cur.p.Data == ch.data.key) {
		return
	}
	s.remove(ctx, ch.data.key)
}

// remove deletes a data object, best effort, with its own short timeout
// that survives the caller's cancellation.
func (s *Store) remove(ctx context.Context, dataKey string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_ = s.client.RemoveObject(ctx, s.bucket, dataKey, minio.RemoveObjectOptions{})
}

func wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Get returns the current content of key, the state its pointer records
// (Info.Token is the token that wrote it) and a reader the caller must
// close. A key without pointer or with a tombstone yields *NotFoundError.
// If the data object was removed between the pointer read and the data
// read (a newer write superseded it), Get reads the pointer again.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, Info, error) {
	if err := checkKey(s.prefix, key); err != nil {
		return nil, Info{}, err
	}
	var lastWrite string
	for attempt := 1; attempt <= s.max; attempt++ {
		cur, err := s.readPointer(ctx, key)
		if err != nil {
			return nil, Info{}, err
		}
		if cur.p == nil {
			return nil, Info{}, &NotFoundError{Key: key}
		}
		if cur.p.Deleted {
			return nil, s.info(key, cur.p), &NotFoundError{Key: key, Deleted: true, Token: cur.p.Token}
		}
		if cur.p.inline() {
			return io.NopCloser(bytes.NewReader(cur.p.Inline)), s.info(key, cur.p), nil
		}
		if s.beforeData != nil {
			s.beforeData(key)
		}
		var opts minio.GetObjectOptions
		if err := opts.SetMatchETag(cur.p.ETag); err != nil {
			return nil, Info{}, fmt.Errorf("s3guard: %q: %w", key, err)
		}
		// One GET: once it has answered, the body streams even if the data
		// object is removed meanwhile.
		rc, _, _, err := minio.Core{Client: s.client}.GetObject(ctx, s.bucket, cur.p.Data, opts)
		if err == nil {
			return rc, s.info(key, cur.p), nil
		}
		code, status := errCode(err)
		switch {
		case isNoSuchKey(err):
			if cur.p.WriteID == lastWrite {
				return nil, Info{}, &DataError{Key: key, DataKey: cur.p.Data, Reason: "is missing"}
			}
			lastWrite = cur.p.WriteID // superseded meanwhile? read the pointer again
		case code == "PreconditionFailed" || status == http.StatusPreconditionFailed:
			return nil, Info{}, &DataError{Key: key, DataKey: cur.p.Data, Reason: "no longer has ETag " + cur.p.ETag}
		default:
			return nil, Info{}, fmt.Errorf("s3guard: read data %q: %w", cur.p.Data, err)
		}
	}
	return nil, Info{}, fmt.Errorf("s3guard: %q: content kept moving during %d reads: %w", key, s.max, fence.ErrBusy)
}

// GetBytes is Get reading the whole content into memory.
func (s *Store) GetBytes(ctx context.Context, key string) ([]byte, Info, error) {
	rc, info, err := s.Get(ctx, key)
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
