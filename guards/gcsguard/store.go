package gcsguard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"cloud.google.com/go/storage"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/api/googleapi"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardobs"
)

// DefaultMaxAttempts is the Config.MaxAttempts used when none is set.
const DefaultMaxAttempts = 8

// DefaultChunkSize is the Config.ChunkSize used when none is set.
const DefaultChunkSize = 256 << 10

// readBackTimeout bounds the read that settles a write whose outcome is
// unknown.
const readBackTimeout = 10 * time.Second

// Config configures a Guard. Client and Bucket are required.
type Config struct {
	// Client talks to GCS (or an emulator). Required.
	Client *storage.Client
	// Bucket holds the objects. Required; it must exist.
	Bucket string
	// MaxAttempts bounds the conditional writes of one call (and the reads
	// of one Get). When every attempt loses a race worth retrying, the
	// call fails with an error matching fence.ErrBusy. Default
	// DefaultMaxAttempts.
	MaxAttempts int
	// ChunkSize is the storage.Writer chunk size of each upload: content up
	// to it goes in one request that the client library can retry;
	// larger content is a resumable upload in chunks of this size. A
	// multiple of 256 KiB. Each upload holds a buffer of this size.
	// Default DefaultChunkSize.
	ChunkSize int
	// MeterProvider records, with the attribute guard="gcs",
	// fencekit.guard.accepted (committed fenced writes),
	// fencekit.guard.stale and fencekit.guard.token_gap (stale refusals and
	// their gap), fencekit.guard.reused (writes refused as
	// *fence.ReusedError) and fencekit.guard.gcs.retries (conditional
	// writes retried after losing a race to another writer). No attribute
	// names a resource or a run. Nil records nothing.
	MeterProvider metric.MeterProvider
	// TracerProvider records one span (guardobs.SpanWrite, a child of the
	// span in ctx) per Put, Delete, Do or Fence call that got past the argument checks (to the final object write), and per call refused by them. Nil records none.
	TracerProvider trace.TracerProvider
	// Logger receives one Error record per write refused because its token
	// was reused by another run (*fence.ReusedError), with the resource, the
	// token and both run identities. Nil discards.
	Logger *slog.Logger
	// Strict refuses, before anything is read or written, every write
	// whose resource lies outside its claim's scope (fence.CheckScope: a lease's
	// claim is scoped to its key, lease.Key.Scope, the prefix of every
	// lease.Key.Resource), and every write whose claim has no scope, with
	// a *fence.ScopeError (fence.ErrOutOfScope). Off by default: scopes
	// are ignored.
	Strict bool
}

// Guard is a fenced view of one GCS bucket. It is safe for concurrent use,
// also together with other Guards (in other processes) over the same bucket.
type Guard struct {
	bucket *storage.BucketHandle
	name   string
	max    int
	chunk  int
	met    *guardobs.Recorder
	strict bool

	// afterRead, when set (tests only), runs after every read of the
	// fenced write path, before the decision.
	afterRead func(key string)
}

var _ fence.Guard = (*Guard)(nil)

// New validates cfg, fills defaults and returns a Guard. It does no I/O.
func New(cfg Config) (*Guard, error) {
	if cfg.Client == nil {
		return nil, fmt.Errorf("%w: Client is nil", ErrInvalidConfig)
	}
	if cfg.Bucket == "" {
		return nil, fmt.Errorf("%w: Bucket is empty", ErrInvalidConfig)
	}
	switch {
	case cfg.MaxAttempts < 0:
		return nil, fmt.Errorf("%w: MaxAttempts %d is negative", ErrInvalidConfig, cfg.MaxAttempts)
	case cfg.MaxAttempts == 0:
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	switch {
	case cfg.ChunkSize == 0:
		cfg.ChunkSize = DefaultChunkSize
	case cfg.ChunkSize < 0 || cfg.ChunkSize%(256<<10) != 0:
		return nil, fmt.Errorf("%w: ChunkSize %d is not a positive multiple of 256 KiB", ErrInvalidConfig, cfg.ChunkSize)
	}
	met, err := guardobs.New(guardobs.Config{Kind: guardobs.KindGCS, Name: "gcsguard",
		Retries:       "GCS conditional writes retried after losing a race (412).",
		MeterProvider: cfg.MeterProvider, TracerProvider: cfg.TracerProvider, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return &Guard{
		bucket: cfg.Client.Bucket(cfg.Bucket), name: cfg.Bucket, max: cfg.MaxAttempts, chunk: cfg.ChunkSize,
		met: met, strict: cfg.Strict,
	}, nil
}

// Bucket returns the name of the Guard's bucket.
func (s *Guard) Bucket() string { return s.name }

func isPrecondition(err error) bool {
	var ge *googleapi.Error
	return errors.As(err, &ge) && ge.Code == http.StatusPreconditionFailed
}

// read returns the state of key: no object, or gcsguard's metadata of it.
func (s *Guard) read(ctx context.Context, key string) (state, error) {
	a, err := s.bucket.Object(key).Attrs(ctx)
	if errors.Is(err, storage.ErrObjectNotExist) {
		return state{}, nil
	}
	if err != nil {
		return state{}, fence.WrapContext(ctx, fmt.Errorf("gcsguard: read %q: %w", key, err))
	}
	return decode(key, a)
}

// Stat returns the state of resource as its metadata records it. A
// resource without object yields *NotFoundError; a tombstone yields its
// Info together with a *NotFoundError whose Deleted is set.
func (s *Guard) Stat(ctx context.Context, resource string) (Info, error) {
	if ctx == nil {
		return Info{}, nilContext(resource)
	}
	if err := checkResource(resource); err != nil {
		return Info{}, err
	}
	if err := fence.ContextError(ctx); err != nil {
		return Info{}, err
	}
	st, err := s.read(ctx, resource)
	switch {
	case err != nil:
		return Info{}, err
	case !st.exists():
		return Info{}, &NotFoundError{Resource: resource}
	case st.deleted:
		return st.info(resource), &NotFoundError{Resource: resource, Deleted: true, Token: st.token}
	}
	return st.info(resource), nil
}

// Mark returns the resource's high-water mark as a claim: the token stored
// with its object (content or tombstone) and the run identity stored with
// it, or the zero Claim when the resource has no object.
func (s *Guard) Mark(ctx context.Context, resource string) (fence.Claim, error) {
	if ctx == nil {
		return fence.Claim{}, nilContext(resource)
	}
	if err := checkResource(resource); err != nil {
		return fence.Claim{}, err
	}
	if err := fence.ContextError(ctx); err != nil {
		return fence.Claim{}, err
	}
	st, err := s.read(ctx, resource)
	if err != nil {
		return fence.Claim{}, err
	}
	return fence.Claim{Token: st.token, Run: st.run}, nil
}

// Get returns the current content of resource, its Info and a reader the
// caller must close. The bytes are those of the generation the Info
// describes. A resource without object or with a tombstone yields *NotFoundError. If the
// object is replaced between the metadata read and the content read, Get
// reads again.
func (s *Guard) Get(ctx context.Context, resource string) (io.ReadCloser, Info, error) {
	if ctx == nil {
		return nil, Info{}, nilContext(resource)
	}
	if err := checkResource(resource); err != nil {
		return nil, Info{}, err
	}
	if err := fence.ContextError(ctx); err != nil {
		return nil, Info{}, err
	}
	for range s.max {
		st, err := s.read(ctx, resource)
		switch {
		case err != nil:
			return nil, Info{}, err
		case !st.exists():
			return nil, Info{}, &NotFoundError{Resource: resource}
		case st.deleted:
			return nil, st.info(resource), &NotFoundError{Resource: resource, Deleted: true, Token: st.token}
		}
		rc, err := s.bucket.Object(resource).Generation(st.gen).NewReader(ctx)
		if errors.Is(err, storage.ErrObjectNotExist) {
			continue // superseded meanwhile: read the metadata again
		}
		if err != nil {
			return nil, Info{}, fence.WrapContext(ctx, fmt.Errorf("gcsguard: read %q generation %d: %w", resource, st.gen, err))
		}
		return rc, st.info(resource), nil
	}
	return nil, Info{}, contextErr(ctx, fmt.Errorf("gcsguard: %q: replaced during each of %d reads: %w", resource, s.max, fence.ErrBusy))
}

// GetBytes is Get reading the whole content into memory.
func (s *Guard) GetBytes(ctx context.Context, resource string) ([]byte, Info, error) {
	rc, info, err := s.Get(ctx, resource)
	if err != nil {
		return nil, info, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, Info{}, fence.WrapContext(ctx, fmt.Errorf("gcsguard: read %q: %w", resource, err))
	}
	return b, info, nil
}

// Put stores size bytes from r at resource under the claim ctx carries
// (fence.ClaimFromContext: a lease's context carries its token and run
// identity). With no claim in ctx it returns an error matching
// fence.ErrNoToken and writes nothing. An io.ReadSeeker is streamed (and
// rewound for a retry); any other reader is read into memory first.
//
// size is the content's length in bytes, or -1 when it is not known (the
// arguments are s3guard.Guard.Put's). A known size is checked before the
// write is committed: content shorter or longer than size is refused with
// a *SizeError (ErrSizeMismatch) and nothing is written. A known size
// below Config.ChunkSize also sizes the upload's buffer to the content
// (rounded up to 256 KiB) instead of a whole chunk; the upload is then one
// request, which the client library can retry.
func (s *Guard) Put(ctx context.Context, resource string, r io.Reader, size int64, opts PutOptions) (Info, error) {
	if ctx == nil {
		return Info{}, nilContext(resource)
	}
	c, err := fence.ClaimFromContext(ctx)
	if err != nil {
		return Info{}, err
	}
	return s.PutClaim(ctx, resource, c, r, size, opts)
}

// PutBytes is Put for content held in memory.
func (s *Guard) PutBytes(ctx context.Context, resource string, b []byte, opts PutOptions) (Info, error) {
	return s.Put(ctx, resource, bytes.NewReader(b), int64(len(b)), opts)
}

// PutBytesClaim is PutClaim for content held in memory.
func (s *Guard) PutBytesClaim(ctx context.Context, resource string, claim fence.Claim, b []byte, opts PutOptions) (Info, error) {
	return s.PutClaim(ctx, resource, claim, bytes.NewReader(b), int64(len(b)), opts)
}

// PutClaim is Put with an explicit claim. A caller holding only a token
// passes fence.Claim{Token: t}, or fence.ClaimFor(ctx, t) to keep ctx's run
// identity for that token.
//
// The write is refused with a *fence.StaleError when c.Token is below the
// resource's mark and with a *fence.ReusedError when it equals the mark
// while c.Run and the mark's run identity are both set and differ; nothing
// is written. A size below -1 is refused with ErrInvalidOptions.
func (s *Guard) PutClaim(ctx context.Context, resource string, claim fence.Claim, r io.Reader, size int64, opts PutOptions) (_ Info, err error) {
	c := claim
	if err := checkOptions(opts); err != nil {
		return Info{}, err
	}
	if size < -1 {
		return Info{}, fmt.Errorf("%w: size %d (want -1 for unknown, or at least 0)", ErrInvalidOptions, size)
	}
	if r == nil {
		return Info{}, fmt.Errorf("%w: nil reader", ErrInvalidOptions)
	}
	if err := s.checkArgs(ctx, resource, c); err != nil {
		return Info{}, err
	}
	ctx, span := s.met.Start(ctx, resource, c)
	defer func() { span.End(err) }()
	b, err := newBody(ctx, resource, r, size)
	if err != nil {
		return Info{}, err
	}
	cur, err := s.readDecide(ctx, resource, c)
	if err != nil {
		return Info{}, s.finish(ctx, err)
	}
	info, err := s.commit(ctx, resource, c, newWriteID(), &change{body: b, opts: opts}, cur)
	return info, s.finish(ctx, err)
}

// Delete stores a tombstone at resource under the claim ctx carries: a
// zero-byte object whose metadata keeps the resource's mark (MetaDeleted is
// "true"), written with the same generation precondition as Put. The
// object is replaced, not removed, because a removed object has no mark:
// a stale writer could then create it again. Afterwards Get reports
// *NotFoundError with Deleted and Token set. Deleting a resource without object
// writes the tombstone all the same, raising the mark.
func (s *Guard) Delete(ctx context.Context, resource string) (Info, error) {
	if ctx == nil {
		return Info{}, nilContext(resource)
	}
	c, err := fence.ClaimFromContext(ctx)
	if err != nil {
		return Info{}, err
	}
	return s.DeleteClaim(ctx, resource, c)
}

// DeleteClaim is Delete with an explicit claim (see PutClaim).
func (s *Guard) DeleteClaim(ctx context.Context, resource string, claim fence.Claim) (_ Info, err error) {
	c := claim
	if err := s.checkArgs(ctx, resource, c); err != nil {
		return Info{}, err
	}
	ctx, span := s.met.Start(ctx, resource, c)
	defer func() { span.End(err) }()
	cur, err := s.readDecide(ctx, resource, c)
	if err != nil {
		return Info{}, s.finish(ctx, err)
	}
	info, err := s.commit(ctx, resource, c, newWriteID(), &change{deleted: true}, cur)
	return info, s.finish(ctx, err)
}

// Do is Fence under the claim ctx carries (fence.ClaimFromContext): with no
// claim in ctx it returns an error matching fence.ErrNoToken, calls nothing
// and writes nothing.
func (s *Guard) Do(ctx context.Context, resource string, write func(ctx context.Context) error) error {
	if ctx == nil {
		return nilContext(resource)
	}
	c, err := fence.ClaimFromContext(ctx)
	if err != nil {
		return err
	}
	return s.fence(ctx, resource, c, write)
}

// Fence implements fence.Guard for the object named resource, under
// fence.ClaimFor(ctx, token).
//
// It reads the object's metadata and refuses a stale token
// (*fence.StaleError) or a reused one (*fence.ReusedError) without calling
// write. Otherwise it calls write with a context that carries the claim and a
// stager: write may call Stage to provide new content or StageDelete to
// stage a tombstone. Nothing is written while write runs; after it returns
// nil, the staged change is written with the generation precondition, which
// is the commit point. If write stages nothing, the current content (or a
// tombstone, if there is none) is written again under token, so the mark is
// raised all the same.
//
// When write fails, its error is returned and nothing is written. A nil
// write yields ErrNilWrite (after the resource and token checks).
func (s *Guard) Fence(ctx context.Context, resource string, token fence.Token, write func(ctx context.Context) error) error {
	if ctx == nil {
		return nilContext(resource)
	}
	return s.fence(ctx, resource, fence.ClaimFor(ctx, token), write)
}

func (s *Guard) fence(ctx context.Context, resource string, c fence.Claim, write func(ctx context.Context) error) (err error) {
	if err := s.checkArgs(ctx, resource, c); err != nil {
		return err
	}
	ctx, span := s.met.Start(ctx, resource, c)
	defer func() { span.End(err) }()
	if write == nil {
		return ErrNilWrite
	}
	cur, err := s.readDecide(ctx, resource, c)
	if err != nil {
		return s.finish(ctx, err)
	}
	st := &stager{resource: resource}
	werr := write(context.WithValue(fence.WithClaim(ctx, c), stagerKey{}, st))
	ch := st.close()
	if werr != nil {
		return contextErr(ctx, werr) // the callback's error, not a decision
	}
	if err := fence.ContextError(ctx); err != nil {
		return err
	}
	_, err = s.commit(ctx, resource, c, newWriteID(), ch, cur)
	return s.finish(ctx, err)
}

func (s *Guard) checkArgs(ctx context.Context, key string, c fence.Claim) error {
	if ctx == nil {
		return nilContext(key)
	}
	err := s.argsError(ctx, key, c)
	s.met.Refused(ctx, key, c, err)
	return err
}

func (s *Guard) argsError(ctx context.Context, key string, c fence.Claim) error {
	if err := checkResource(key); err != nil {
		return err
	}
	if err := c.Validate(); err != nil {
		return err
	}
	if s.strict {
		if err := fence.CheckScope(key, c); err != nil {
			return err
		}
	}
	return fence.ContextError(ctx)
}

// readDecide reads key and applies the decision rule to c.
func (s *Guard) readDecide(ctx context.Context, key string, c fence.Claim) (state, error) {
	cur, err := s.read(ctx, key)
	if err != nil {
		return state{}, err
	}
	if s.afterRead != nil {
		s.afterRead(key)
	}
	if err := fence.DecideClaim(key, c, cur.token, cur.run); err != nil {
		return state{}, err
	}
	return cur, nil
}

// commit runs the conditional write loop over cur.
func (s *Guard) commit(ctx context.Context, key string, c fence.Claim, writeID string, ch *change, cur state) (Info, error) {
	for lost := 0; ; {
		if err := fence.ContextError(ctx); err != nil {
			return Info{}, fmt.Errorf("gcsguard: write %q: not sent: %w", key, err)
		}
		attrs, err := s.attempt(ctx, key, c, writeID, ch, cur)
		if err == nil {
			st, derr := decode(key, attrs)
			if derr != nil {
				return Info{}, fmt.Errorf("gcsguard: %q: written object reads back as foreign: %w", key, derr)
			}
			return st.info(key), nil
		}
		var be *bodyError
		switch {
		case errors.As(err, &be):
			return Info{}, fence.WrapContext(ctx, err) // nothing was committed
		case isPrecondition(err):
			// Someone else's write, or our own earlier attempt whose reply
			// was lost and that the client library retried: the read tells.
		default:
			// Sent, and no answer came back (ctx ended while the upload
			// waited, or the client library gave up): the object may have
			// been written. Settle it with a read that survives the
			// caller's cancellation: our write id means it was written, and
			// the write is reported as done even if ctx has ended (it was
			// ordered before any newer token's write). Anything else leaves
			// the outcome unknown: the upload may still complete, or
			// completed and was replaced.
			got, rerr := s.settleRead(ctx, key)
			if rerr == nil && got.writeID == writeID {
				return got.info(key), nil
			}
			if rerr == nil && got.token > c.Token && got.gen != cur.gen {
				// A newer holder's generation replaced the one the upload
				// was conditional on, so it can no longer land; it may have
				// landed before and been overwritten.
				return Info{}, fence.WrapContext(ctx, overtaken(key, c, got))
			}
			return Info{}, fence.OutcomeUnknown(ctx, "gcsguard: write", key, fmt.Errorf("write id %s: %w", writeID, err))
		}
		if fence.ContextError(ctx) != nil {
			// The 412 may answer the client library's retry of an attempt
			// of ours that landed; ctx can no longer read, a bounded read
			// of its own can.
			if got, rerr := s.settleRead(ctx, key); rerr == nil && got.writeID == writeID {
				return got.info(key), nil
			}
			return Info{}, fmt.Errorf("gcsguard: write %q: precondition failed: %w", key, fence.ContextError(ctx))
		}
		if cur, err = s.read(ctx, key); err != nil {
			return Info{}, err
		}
		if cur.writeID == writeID {
			return cur.info(key), nil // our attempt landed; its reply was lost
		}
		if s.afterRead != nil {
			s.afterRead(key)
		}
		if err := fence.DecideClaim(key, c, cur.token, cur.run); err != nil {
			return Info{}, err
		}
		if lost++; lost >= s.max {
			return Info{}, fmt.Errorf("gcsguard: %q: %d conditional writes lost races: %w", key, lost, fence.ErrBusy)
		}
		if err := fence.ContextError(ctx); err != nil {
			return Info{}, err
		}
		s.met.Retried(ctx, 1)
	}
}

// settleRead reads key with a context of its own, bounded by
// readBackTimeout, that keeps ctx's values but not its end.
func (s *Guard) settleRead(ctx context.Context, key string) (state, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readBackTimeout)
	defer cancel()
	return s.read(ctx, key)
}

// attempt makes one conditional write of ch over cur.
func (s *Guard) attempt(ctx context.Context, key string, c fence.Claim, writeID string, ch *change, cur state) (*storage.ObjectAttrs, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cond := storage.Conditions{DoesNotExist: true}
	if cur.exists() {
		cond = storage.Conditions{GenerationMatch: cur.gen}
	}
	src, size, opts, deleted, err := s.source(wctx, key, ch, cur)
	if err != nil {
		return nil, err
	}
	if src != nil {
		defer src.Close()
	}
	token, run := fence.NextMark(c, cur.token, cur.run)
	w := s.bucket.Object(key).If(cond).NewWriter(wctx)
	w.ChunkSize = s.chunkFor(size)
	w.ContentType = opts.ContentType
	w.CacheControl = opts.CacheControl
	w.Metadata = objectMetadata(opts.Metadata, token, run, writeID, deleted)
	if src != nil {
		if _, err := io.Copy(w, src); err != nil {
			var be *bodyError
			if errors.As(err, &be) {
				cancel() // abort the upload before Close can finalise it
				_ = w.Close()
				return nil, err
			}
			// The upload failed; Close reports its error.
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return w.Attrs(), nil
}

// chunkFor returns the storage.Writer chunk size of an upload of size bytes
// (-1: unknown): Config.ChunkSize, or for a known size below it the
// smallest multiple of 256 KiB above size, so that the upload is still one
// retryable request but its buffer fits the content.
func (s *Guard) chunkFor(size int64) int {
	const unit = 256 << 10
	if size < 0 || size >= int64(s.chunk) {
		return s.chunk
	}
	return int((size/unit + 1) * unit)
}

// source opens the content of one attempt and returns its size (-1:
// unknown).
func (s *Guard) source(ctx context.Context, key string, ch *change, cur state) (io.ReadCloser, int64, PutOptions, bool, error) {
	switch {
	case ch.body != nil:
		r, err := ch.body.open()
		return r, ch.body.length(), ch.opts, false, err
	case ch.deleted || !cur.exists() || cur.deleted:
		return nil, 0, PutOptions{}, true, nil
	}
	// Nothing staged: write the current content again under the new mark.
	a := cur.attrs
	rc, err := s.bucket.Object(key).Generation(cur.gen).NewReader(ctx)
	if err != nil {
		// The generation is gone: a newer write replaced it. Fail like a
		// precondition so that the loop reads and decides again.
		if errors.Is(err, storage.ErrObjectNotExist) {
			return nil, 0, PutOptions{}, false, &googleapi.Error{Code: http.StatusPreconditionFailed, Message: "generation replaced"}
		}
		return nil, 0, PutOptions{}, false, err
	}
	opts := PutOptions{ContentType: a.ContentType, CacheControl: a.CacheControl, Metadata: userMetadata(a.Metadata)}
	return readCloser{&bodyReader{r: rc}, rc}, a.Size, opts, false, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// change is what a write commits.
type change struct {
	body    *body // new content, or nil
	opts    PutOptions
	deleted bool // a tombstone
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
func newBody(ctx context.Context, resource string, r io.Reader, size int64) (*body, error) {
	if rs, ok := r.(io.ReadSeeker); ok {
		off, err := rs.Seek(0, io.SeekCurrent)
		if err == nil {
			return &body{seeker: rs, start: off, size: size, resource: resource}, nil
		}
	}
	b, err := readSized(resource, r, size)
	if err != nil {
		return nil, fence.WrapContext(ctx, err)
	}
	return &body{buf: b}, nil
}

// readSized reads r to its end into memory. With size ≥ 0 it reads at most
// size+1 bytes and returns a *SizeError unless exactly size came. Read
// errors are *bodyErrors.
func readSized(resource string, r io.Reader, size int64) ([]byte, error) {
	if size < 0 {
		b, err := io.ReadAll(r)
		if err != nil {
			return nil, &bodyError{err: err}
		}
		return b, nil
	}
	limit := size + 1
	if limit < 0 { // size is math.MaxInt64
		limit = size
	}
	var buf bytes.Buffer
	buf.Grow(int(min(limit, 1<<20)))
	if _, err := buf.ReadFrom(io.LimitReader(r, limit)); err != nil {
		return nil, &bodyError{err: err}
	}
	if n := int64(buf.Len()); n != size {
		return nil, &SizeError{Resource: resource, Size: size, Read: n}
	}
	return buf.Bytes(), nil
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
		r = &sizedReader{r: r, size: b.size, resource: b.resource}
	}
	return io.NopCloser(&bodyReader{r: r}), nil
}

// sizedReader reads exactly size bytes from r: fewer (r ends early) or more
// (r has more) is a *SizeError, reported before the upload is finalised.
type sizedReader struct {
	r        io.Reader
	size, n  int64
	resource string
}

func (s *sizedReader) Read(p []byte) (int, error) {
	if rem := s.size - s.n + 1; rem >= 0 && int64(len(p)) > rem {
		p = p[:rem] // at most one byte past size: enough to see more content
	}
	k, err := s.r.Read(p)
	s.n += int64(k)
	switch {
	case s.n > s.size:
		return 0, &SizeError{Resource: s.resource, Size: s.size, Read: s.n}
	case err == io.EOF && s.n != s.size:
		return k, &SizeError{Resource: s.resource, Size: s.size, Read: s.n}
	}
	return k, err
}

// bodyError is a failure to read the content to upload (not a store error),
// or content that does not match its declared size (a *SizeError).
type bodyError struct{ err error }

func (e *bodyError) Error() string {
	var se *SizeError
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

// overtaken is the refusal of a write under c whose upload was sent
// without a conclusive answer and which the settling read found replaced by
// a newer holder's object got: it may have landed before being overwritten.
func overtaken(key string, c fence.Claim, got state) error {
	return &fence.StaleError{Resource: key, Presented: c.Token, Highest: got.token, Overtaken: true}
}
