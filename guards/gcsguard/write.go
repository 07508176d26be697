package gcsguard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/internal/engine"
	"github.com/fencekit/fencekit/guards/internal/objstage"
)

// Put stores size bytes from r at resource under the claim ctx carries
// (fence.ClaimFromContext: a lease's context carries its token and run
// identity; a claim from elsewhere goes in with fence.WithClaim). With no
// claim in ctx it returns an error matching fence.ErrNoToken and writes
// nothing. The write is refused with a *fence.StaleError when the claim's
// token is below the resource's mark and with a *fence.ReusedError when it
// equals the mark while the claim's run and the mark's are both set and
// differ; nothing is written. A size below -1 is refused with
// ErrInvalidOptions. An io.ReadSeeker is streamed (and
// rewound for a retry); any other reader is read into memory first.
//
// size is the content's length in bytes, or -1 when it is not known (the
// arguments are s3guard.Guard.Put's). A known size is checked before the
// write is committed: content shorter or longer than size is refused with
// a *fence.SizeError (fence.ErrSizeMismatch) and nothing is written. A known size
// below Config.ChunkSize also sizes the upload's buffer to the content
// (rounded up to 256 KiB) instead of a whole chunk; the upload is then one
// request, which the client library can retry.
func (s *Guard) Put(ctx context.Context, resource string, r io.Reader, size int64, opts PutOptions) (Info, error) {
	return s.put(ctx, resource, nil, r, size, opts)
}

// PutBytes is Put for content held in memory.
func (s *Guard) PutBytes(ctx context.Context, resource string, b []byte, opts PutOptions) (Info, error) {
	return s.Put(ctx, resource, bytes.NewReader(b), int64(len(b)), opts)
}

func (s *Guard) put(ctx context.Context, resource string, c *fence.Claim, r io.Reader, size int64, opts PutOptions) (Info, error) {
	if err := checkOptions(opts); err != nil {
		return Info{}, err
	}
	if err := objstage.CheckBody(r, size, ErrInvalidOptions); err != nil {
		return Info{}, err
	}
	return s.write(ctx, resource, c, func(ctx context.Context) error {
		return objstage.StageContent(ctx, guardName, nil, r, size, ErrInvalidOptions, func(st *engine.Stager) (engine.Change, error) {
			b, err := newBody(st.Resource, r, size)
			return engine.Change{Op: engine.OpPut, Content: &content{body: b, opts: opts}}, err
		})
	})
}

// Delete stores a tombstone at resource under the claim ctx carries: a
// zero-byte object whose metadata keeps the resource's mark (MetaDeleted is
// "true"), written with the same generation precondition as Put. The
// object is replaced, not removed, because a removed object has no mark:
// a stale writer could then create it again. Afterwards Get reports
// *fence.NotFoundError with Deleted and Token set. Deleting a resource without object
// writes the tombstone all the same, raising the mark.
func (s *Guard) Delete(ctx context.Context, resource string) (Info, error) {
	return s.write(ctx, resource, nil, StageDelete)
}

// Do is Fence under the claim ctx carries (fence.ClaimFromContext): with no
// claim in ctx it returns an error matching fence.ErrNoToken, calls nothing
// and writes nothing.
func (s *Guard) Do(ctx context.Context, resource string, write func(ctx context.Context) error) error {
	_, err := s.write(ctx, resource, nil, write)
	return err
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
// write yields an error matching fence.ErrNilArgument (after the resource
// and token checks).
func (s *Guard) Fence(ctx context.Context, resource string, token fence.Token, write func(ctx context.Context) error) error {
	if ctx == nil {
		return s.eng.NilArgument(resource, "nil ctx")
	}
	c := fence.ClaimFor(ctx, token)
	_, err := s.write(ctx, resource, &c, write)
	return err
}

// write is every fenced write: the claim ctx carries (c nil) or *c,
// checked (engine.Args), then the engine's run of write over a call of its
// own, on a fresh read (gcsguard has no cache).
func (s *Guard) write(ctx context.Context, resource string, c *fence.Claim, write func(ctx context.Context) error) (info Info, err error) {
	err = s.eng.Claimed(ctx, resource, c, func(c fence.Claim) error {
		w := &call{s: s, key: resource}
		err := s.eng.With(w).Run(ctx, resource, c, engine.ReadFresh, write)
		info = w.info
		return err
	})
	return info, engine.ContextErr(ctx, guardName, err)
}

// call is one fenced write's engine.Driver, and each of its attempts: the
// object state its attempts decide on and what they committed.
type call struct {
	s   *Guard
	key string
	// cur is the state the attempt decides on; fresh says the last lost
	// race read it just now, so the next attempt need not read again.
	cur   state
	fresh bool
	info  Info // what was committed
}

// Open returns the attempt on key's object: the state the last lost race
// read, or one read now.
func (w *call) Open(ctx context.Context, key string, _ engine.Read) (engine.Attempt, error) {
	if !w.fresh {
		cur, err := w.s.read(ctx, key)
		if err != nil {
			return nil, err
		}
		w.cur = cur
		w.s.hook(key)
	}
	w.fresh = false
	return w, nil
}

// Mark returns the object's mark, read now.
func (w *call) Mark() (fence.Claim, bool, bool) {
	return fence.Claim{Token: w.cur.token, Run: w.cur.run}, true, false
}

// Close does nothing: an attempt holds nothing.
func (w *call) Close() {}

// Commit uploads ch over cur under c with the generation precondition.
func (w *call) Commit(ctx context.Context, c fence.Claim, ch engine.Change, id string) (engine.Result, error) {
	s, key := w.s, w.key
	attrs, err := s.attempt(ctx, key, c, id, ch, w.cur)
	if err == nil {
		st, derr := decode(key, attrs)
		if derr != nil {
			return engine.Failed, fmt.Errorf("gcsguard: %q: written object reads back as foreign: %w", key, derr)
		}
		w.info = st.info(key)
		return engine.Committed, nil
	}
	var be *bodyError
	switch {
	case errors.As(err, &be):
		return engine.Failed, fence.WrapContext(ctx, err) // nothing was committed
	case !isPrecondition(err):
		// Sent, and no answer came back (ctx ended while the upload
		// waited, or the client library gave up): the object may have
		// been written. Settle decides.
		return engine.Lost, err
	}
	// Someone else's write, or our own earlier attempt whose reply was
	// lost and that the client library retried: the read tells. Otherwise
	// c is decided on what was read: a refusal ends the call, an admission
	// is a lost race, and the next attempt starts from that read. Once
	// ctx has ended the read has a context of its own, and anything but
	// ours ends the call.
	if cerr := fence.ContextError(ctx); cerr != nil {
		if got, rerr := s.settleRead(ctx, key); rerr == nil && got.writeID == id {
			w.info = got.info(key)
			return engine.Committed, nil
		}
		return engine.Failed, fmt.Errorf("gcsguard: write %q: precondition failed: %w", key, cerr)
	}
	cur, err := s.read(ctx, key)
	switch {
	case err != nil:
		return engine.Failed, err
	case cur.writeID == id:
		w.info = cur.info(key) // our attempt landed; its reply was lost
		return engine.Committed, nil
	}
	s.hook(key)
	w.cur, w.fresh = cur, true
	if err := fence.DecideClaim(key, c, cur.token, cur.run); err != nil {
		return engine.Failed, err
	}
	return engine.Conflict, nil
}

// Settle reads the object of an upload whose reply was lost, with a
// context of its own that survives ctx: our write id means it was written
// (reported as done even if ctx has ended: it was ordered before any newer
// token's write); a newer holder's generation replacing the one the upload
// was conditional on means it can no longer land, though it may have
// before (a stale refusal marked Overtaken); anything else leaves the
// outcome unknown.
func (w *call) Settle(ctx context.Context, c fence.Claim, _ engine.Change, id string, lost error) (engine.Result, error) {
	got, rerr := w.s.settleRead(ctx, w.key)
	switch {
	case rerr == nil && got.writeID == id:
		w.info = got.info(w.key)
		return engine.Committed, nil
	case rerr == nil && got.token > c.Token && got.gen != w.cur.gen:
		return engine.Failed, fence.WrapContext(ctx, overtaken(w.key, c, got))
	}
	return engine.Failed, fence.OutcomeUnknown(ctx, "gcsguard: write", w.key, fmt.Errorf("write id %s: %w", id, lost))
}

// hook runs the test hook afterRead, when set: after every read of the
// fenced write path, before the decision.
func (s *Guard) hook(key string) {
	if s.afterRead != nil {
		s.afterRead(key)
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
func (s *Guard) attempt(ctx context.Context, key string, c fence.Claim, writeID string, ch engine.Change, cur state) (*storage.ObjectAttrs, error) {
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
func (s *Guard) source(ctx context.Context, key string, ch engine.Change, cur state) (io.ReadCloser, int64, PutOptions, bool, error) {
	switch {
	case ch.Op == engine.OpPut:
		c := ch.Content.(*content)
		r, err := c.body.open()
		return r, c.body.length(), c.opts, false, err
	case ch.Op == engine.OpDelete || !cur.exists() || cur.deleted:
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

// overtaken is the refusal of a write under c whose upload was sent
// without a conclusive answer and which the settling read found replaced by
// a newer holder's object got: it may have landed before being overwritten.
func overtaken(key string, c fence.Claim, got state) error {
	return &fence.StaleError{Resource: key, Presented: c.Token, Highest: got.token, Overtaken: true}
}
