package s3guard

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardobs"
	"github.com/fencekit/fencekit/guards/internal/engine"
	"github.com/fencekit/fencekit/guards/s3guard/s3client"
)

// guardName prefixes the guard's errors and names it to the engine.
const guardName = "s3guard"

// DefaultDataPrefix is the Config.DataPrefix used when none is set.
const DefaultDataPrefix = "_fencekit/data/"

// DefaultMaxAttempts is the Config.MaxAttempts used when none is set,
// the same in every guard that has the field.
const DefaultMaxAttempts = engine.DefaultMaxAttempts

// DefaultConflictBackoff is the Config.ConflictBackoff used when none is set.
const DefaultConflictBackoff = 20 * time.Millisecond

// cleanupTimeout bounds each best-effort removal of an unreferenced data
// object.
const cleanupTimeout = 10 * time.Second

// settleTimeout bounds the read that settles the outcome of a pointer write
// sent without a reply; it runs even after the caller's ctx has ended.
const settleTimeout = 10 * time.Second

// Config configures a Guard. Client and Bucket are required.
type Config struct {
	// Client talks to S3 or MinIO: the adapter of the SDK client the
	// caller already has (minioclient.New, awsclient.New) or any other
	// s3client.Client. Required.
	Client s3client.Client
	// Bucket holds the pointers and the data objects. Required; it must
	// exist.
	Bucket string
	// DataPrefix is the key prefix of data objects, ending in "/".
	// Default DefaultDataPrefix. Keys under it are refused as user keys.
	// Changing it makes existing pointers unreadable (*fence.ForeignError).
	DataPrefix string
	// MaxAttempts bounds the conditional pointer writes one call sends,
	// each under a fresh write id, the first included (and the pointer
	// re-reads of one Get); the settling read of a PUT whose reply was
	// lost does not count. Every conditional PUT counts, also one decided
	// on the pointer cache that fails only because the cache was stale.
	// When every attempt loses a race that is worth retrying, the call
	// fails with an error matching fence.ErrBusy. Default
	// DefaultMaxAttempts.
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
	// PointerCacheSize bounds the Guard's pointer cache: for that many
	// keys (least recently used out first) the Guard remembers the last
	// pointer it read or wrote, so that Put and Delete can skip the
	// pointer GET. The cached pointer is only a hint: the write decides
	// against it and commits with If-Match on its ETag, so a pointer
	// written meanwhile by anyone else fails that PUT (412 or 404), and
	// the Guard re-reads and continues as without a cache. A refusal
	// decided on the cache is confirmed by a read before it is returned.
	// An entry holds no content (inline bytes and metadata are left out):
	// a few hundred bytes plus the key. Default DefaultPointerCacheSize;
	// negative disables the cache (every write GETs the pointer first).
	PointerCacheSize int
	// MeterProvider records fencekit.guard.accepted (committed fenced
	// writes), fencekit.guard.stale, fencekit.guard.token_gap,
	// fencekit.guard.reused (writes refused as *fence.ReusedError) and
	// fencekit.guard.s3.retries (conditional pointer writes retried after a
	// 412/404/409, including the retry after a stale pointer cache entry)
	// with guard="s3" (see docs/operations.md). Nil records nothing.
	MeterProvider metric.MeterProvider
	// TracerProvider records one span ("fencekit.guard.write", a child of the
	// span in ctx) per Put, Delete, Do or Fence call that got past the
	// argument checks (to the pointer write), and per call refused by them.
	// Nil records none.
	TracerProvider trace.TracerProvider
	// Logger receives one Error record per write refused because its token
	// was reused by another run (*fence.ReusedError), with the key, the
	// token and both run identities. Nil discards.
	Logger *slog.Logger
	// Strict refuses, before anything is read or written, every write
	// whose key lies outside its claim's scope (fence.CheckScope: a lease's
	// claim is scoped to its key, lease.Key.Scope, the prefix of every
	// lease.Key.Resource), and every write whose claim has no scope, with
	// a *fence.ScopeError (fence.ErrOutOfScope). Off by default: scopes
	// are ignored.
	Strict bool
}

// Guard is a fenced object store over one bucket. It is safe for concurrent
// use, also together with other Guards (in other processes) over the same
// bucket.
type Guard struct {
	client  s3client.Client
	bucket  string
	prefix  string
	max     int
	backoff time.Duration
	keep    bool
	inline  int
	cache   *pointerCache // nil: disabled
	met     *guardobs.Recorder
	eng     *engine.Engine

	// afterRead, when set (tests only), runs after every pointer read or
	// pointer cache hit of the fenced write path, before the decision.
	afterRead func(key string)
	// beforeData, when set (tests only), runs in Get between the pointer
	// read and the data read.
	beforeData func(key string)
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
	if cfg.DataPrefix == "" {
		cfg.DataPrefix = DefaultDataPrefix
	}
	if !strings.HasSuffix(cfg.DataPrefix, "/") {
		return nil, configErr("DataPrefix", fmt.Sprintf("%q must end in '/'", cfg.DataPrefix), nil)
	}
	var ke *fence.ResourceError
	if err := checkResource("\x00", strings.TrimSuffix(cfg.DataPrefix, "/")); errors.As(err, &ke) {
		return nil, configErr("DataPrefix", fmt.Sprintf("%q: %s", cfg.DataPrefix, ke.Reason), nil)
	}
	if len(cfg.DataPrefix)+fence.MaxResourceLen+dataSuffixLen > maxS3KeyLen {
		return nil, configErr("DataPrefix", fmt.Sprintf("longer than %d bytes", maxS3KeyLen-fence.MaxResourceLen-dataSuffixLen), nil)
	}
	if err := engine.MaxAttemptsConfig(&cfg.MaxAttempts, "s3guard"); err != nil {
		return nil, err
	}
	if cfg.InlineMax < 0 || cfg.InlineMax > MaxInline {
		return nil, configErr("InlineMax", fmt.Sprintf("%d outside 0..%d", cfg.InlineMax, MaxInline), nil)
	}
	switch {
	case cfg.ConflictBackoff < 0:
		return nil, configErr("ConflictBackoff", fmt.Sprintf("%v is negative", cfg.ConflictBackoff), nil)
	case cfg.ConflictBackoff == 0:
		cfg.ConflictBackoff = DefaultConflictBackoff
	}
	switch {
	case cfg.PointerCacheSize < 0:
		cfg.PointerCacheSize = 0
	case cfg.PointerCacheSize == 0:
		cfg.PointerCacheSize = DefaultPointerCacheSize
	}
	met, err := guardobs.New(guardobs.Config{Kind: "s3", Name: "s3guard",
		Retries:       "S3 conditional pointer writes retried after losing a race (412/409).",
		MeterProvider: cfg.MeterProvider, TracerProvider: cfg.TracerProvider, Logger: cfg.Logger})
	if err != nil {
		return nil, configErr("MeterProvider", "instruments", err)
	}
	g := &Guard{
		met:     met,
		cache:   newPointerCache(cfg.PointerCacheSize),
		client:  cfg.Client,
		bucket:  cfg.Bucket,
		prefix:  cfg.DataPrefix,
		max:     cfg.MaxAttempts,
		backoff: cfg.ConflictBackoff,
		keep:    cfg.KeepSuperseded,
		inline:  cfg.InlineMax,
	}
	g.eng = &engine.Engine{Args: engine.Args{Name: guardName, Strict: cfg.Strict, Rec: met,
		Resource: func(key string) error { return checkResource(g.prefix, key) }},
		Op: "s3guard: write pointer", MaxAttempts: cfg.MaxAttempts, Bytes: stageBytes}
	return g, nil
}
