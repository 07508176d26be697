package gcsguard

import (
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
	"github.com/fencekit/fencekit/guards/internal/engine"
)

// DefaultMaxAttempts is the Config.MaxAttempts used when none is set,
// the same in every guard that has the field.
const DefaultMaxAttempts = engine.DefaultMaxAttempts

// guardName prefixes the guard's errors and names it to the engine.
const guardName = "gcsguard"

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
	// MaxAttempts bounds the conditional writes one call sends, each under
	// a fresh write id, the first included (and the reads of one Get); the
	// settling read of an upload whose reply was lost does not count. When
	// every attempt loses a race worth retrying, the call fails with an
	// error matching fence.ErrBusy. Default DefaultMaxAttempts.
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
	// TracerProvider records one span ("fencekit.guard.write", a child of the
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
	eng    *engine.Engine

	// afterRead, when set (tests only), runs after every read of the
	// fenced write path, before the decision.
	afterRead func(key string)
}

var _ fence.Guard = (*Guard)(nil)

// New validates cfg, fills defaults and returns a Guard. It does no I/O.
func New(cfg Config) (*Guard, error) {
	if cfg.Client == nil {
		return nil, configErr("Client", "nil", nil)
	}
	if cfg.Bucket == "" {
		return nil, configErr("Bucket", "empty", nil)
	}
	if err := engine.MaxAttemptsConfig(&cfg.MaxAttempts, "gcsguard"); err != nil {
		return nil, err
	}
	switch {
	case cfg.ChunkSize == 0:
		cfg.ChunkSize = DefaultChunkSize
	case cfg.ChunkSize < 0 || cfg.ChunkSize%(256<<10) != 0:
		return nil, configErr("ChunkSize", fmt.Sprintf("%d is not a positive multiple of 256 KiB", cfg.ChunkSize), nil)
	}
	met, err := guardobs.New(guardobs.Config{Kind: "gcs", Name: "gcsguard",
		Retries:       "GCS conditional writes retried after losing a race (412).",
		MeterProvider: cfg.MeterProvider, TracerProvider: cfg.TracerProvider, Logger: cfg.Logger})
	if err != nil {
		return nil, configErr("MeterProvider", "instruments", err)
	}
	g := &Guard{
		bucket: cfg.Client.Bucket(cfg.Bucket), name: cfg.Bucket, max: cfg.MaxAttempts, chunk: cfg.ChunkSize,
		met: met,
	}
	g.eng = &engine.Engine{Args: engine.Args{Name: guardName, Strict: cfg.Strict, Rec: met, Resource: checkResource},
		Op: "gcsguard: write", MaxAttempts: cfg.MaxAttempts, Bytes: stageBytes}
	return g, nil
}

// Sweep is s3guard's Sweep, kept so that both object-store guards have
// the same methods: it checks its arguments like Stat and removes nothing,
// because a gcsguard write keeps its content in memory until it commits one
// generation of the resource's own object, and so leaves no object behind
// that could never become visible. (Noncurrent generations that a bucket's
// object versioning keeps are the bucket's lifecycle rules' to delete.)
func (s *Guard) Sweep(ctx context.Context, resource string) (int, error) {
	if err := s.eng.Read(ctx, resource); err != nil {
		return 0, err
	}
	return 0, nil
}

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
// resource without object yields *fence.NotFoundError; a tombstone yields its
// Info together with a *fence.NotFoundError whose Deleted is set.
func (s *Guard) Stat(ctx context.Context, resource string) (Info, error) {
	if err := s.eng.Read(ctx, resource); err != nil {
		return Info{}, err
	}
	st, err := s.read(ctx, resource)
	switch {
	case err != nil:
		return Info{}, err
	case !st.exists():
		return Info{}, &fence.NotFoundError{Source: "gcsguard", Resource: resource}
	case st.deleted:
		return st.info(resource), &fence.NotFoundError{Source: "gcsguard", Resource: resource, Deleted: true, Token: st.token}
	}
	return st.info(resource), nil
}

// Mark returns the resource's high-water mark as a claim: the token stored
// with its object (content or tombstone) and the run identity stored with
// it, or the zero Claim when the resource has no object.
func (s *Guard) Mark(ctx context.Context, resource string) (fence.Claim, error) {
	if err := s.eng.Read(ctx, resource); err != nil {
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
// describes. A resource without object or with a tombstone yields *fence.NotFoundError. If the
// object is replaced between the metadata read and the content read, Get
// reads again.
func (s *Guard) Get(ctx context.Context, resource string) (io.ReadCloser, Info, error) {
	if err := s.eng.Read(ctx, resource); err != nil {
		return nil, Info{}, err
	}
	for range s.max {
		st, err := s.read(ctx, resource)
		switch {
		case err != nil:
			return nil, Info{}, err
		case !st.exists():
			return nil, Info{}, &fence.NotFoundError{Source: "gcsguard", Resource: resource}
		case st.deleted:
			return nil, st.info(resource), &fence.NotFoundError{Source: "gcsguard", Resource: resource, Deleted: true, Token: st.token}
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
	return nil, Info{}, engine.ContextErr(ctx, "gcsguard", fmt.Errorf("gcsguard: %q: replaced during each of %d reads: %w", resource, s.max, fence.ErrBusy))
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
