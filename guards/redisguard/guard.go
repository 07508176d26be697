package redisguard

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardobs"
	"github.com/fencekit/fencekit/guards/internal/engine"
)

// name prefixes the guard's errors and names it to the engine.
const name = "redisguard"

// Defaults of Config.
const (
	DefaultMarkPrefix    = "fencekit:mark:"
	DefaultCheckTimeout  = 5 * time.Second
	DefaultSettleTimeout = 5 * time.Second
	// DefaultMaxAttempts is Config.MaxAttempts's default, the same in
	// every guard that has the field.
	DefaultMaxAttempts = engine.DefaultMaxAttempts
	// DefaultDuplicateWindow is Config.DuplicateWindow's default: longer
	// than go-redis's default retries of one request take (four attempts
	// of a 3 s read timeout, and their back-off).
	DefaultDuplicateWindow = 20 * time.Second
)

// Config configures a Guard. Client is required.
type Config struct {
	// Client talks to the server: a *redis.Client, *redis.ClusterClient,
	// *redis.Ring or any other redis.UniversalClient. Required. The
	// client may send one write's request more than once (go-redis
	// re-sends a request whose reply timed out, Options.MaxRetries, and a
	// cluster client follows redirects), and a copy held in transit may
	// arrive after a later write: the write-id record and the request's
	// deadline (DuplicateWindow) make every such copy a no-op, whatever
	// the client's settings.
	Client redis.UniversalClient
	// MarkPrefix starts every mark key (see the package documentation for
	// the layout). Resources starting with it are refused. It must be a
	// valid resource name without '{' or '}'. Default DefaultMarkPrefix.
	MarkPrefix string
	// TTL, when positive, is set on every value written (SET ... PX): the
	// value expires, its mark does not. At least a millisecond. Zero: values
	// do not expire.
	TTL time.Duration
	// AllowEviction accepts a server whose maxmemory-policy may evict keys
	// without a TTL (allkeys-*). New refuses such a server otherwise: an
	// evicted mark re-admits every older token.
	AllowEviction bool
	// CheckTimeout bounds the eviction-policy check New makes. Default
	// DefaultCheckTimeout.
	CheckTimeout time.Duration
	// SettleTimeout bounds the request that settles a write whose reply was
	// lost (it runs on a fresh context, so it runs even when the call's own
	// context has ended). Default DefaultSettleTimeout.
	SettleTimeout time.Duration
	// MaxAttempts bounds the conditional writes one call sends, each under
	// a fresh write id, the first included: a write whose reply was lost
	// and that was settled as not applied is sent again while attempts
	// remain and the context is live (the settling request does not
	// count). Default DefaultMaxAttempts.
	MaxAttempts int
	// DuplicateWindow is how long a write's request stays valid: the
	// request carries a deadline, this host's clock at sending plus
	// DuplicateWindow, and the server refuses a copy that arrives after it
	// by its own clock. The ids of applied and of cancelled writes are
	// kept (in a sorted set beside the mark) until a window after the
	// deadline, so a copy that arrives before its deadline finds its id.
	// A copy is never applied after a later write of its run if the
	// server's clock never steps back by more than DuplicateWindow. A
	// host whose clock is more than about half a window behind the
	// server's, or a window ahead, has its writes refused with a
	// *ClockError. Longer windows keep more ids (one per write made in
	// the last two to three windows). At least 10ms, in whole
	// milliseconds. Default DefaultDuplicateWindow.
	DuplicateWindow time.Duration
	// MeterProvider records the guard instruments of package guardobs with
	// guard="redis", and fencekit.guard.redis.retries (writes sent again
	// after a lost reply was settled as not applied). Nil records nothing.
	MeterProvider metric.MeterProvider
	// TracerProvider records one span ("fencekit.guard.write", a child of the
	// span in ctx) per written value, deletion or Fence/Do call (its write callback runs under the span, which a failing callback ends with its error), and per call refused before writing (bad input, out of scope, or stale on the mark Fence/Do read first). Nil records none.
	TracerProvider trace.TracerProvider
	// Logger receives an Error record for every write refused because its
	// token was reused by another run. Nil discards.
	Logger *slog.Logger
	// Strict refuses, before any I/O, every write whose resource lies
	// outside its claim's scope (fence.CheckScope: a lease's claim is
	// scoped to its key, lease.Key.Scope), and every write whose claim has
	// no scope, with a *fence.ScopeError (fence.ErrOutOfScope): a claim for
	// one key can then never raise the mark of another key's resource.
	// Off by default: scopes are ignored.
	Strict bool
}

// Info describes a resource's current mark: the claim of the last write
// admitted (whose value, if any, is the current one) and that write's id.
type Info struct {
	Token   fence.Token
	Run     string
	WriteID string // 32 hex digits
}

// Guard fences writes to Redis keys. It is safe for concurrent use, also
// with other Guards (in other processes) over the same server. It starts
// no goroutine and owns nothing but what New allocates: the Client stays
// the caller's to close.
type Guard struct {
	client         redis.UniversalClient
	prefix         string
	ttlArg         string
	settleTimeout  time.Duration
	window         time.Duration
	windowArg      string // window in ms
	eng            *engine.Engine
	afterWriteSent func()           // tests: runs after a write's reply arrived or failed
	now            func() time.Time // this host's clock (tests shift it)
}

var _ fence.Guard = (*Guard)(nil)

// New validates cfg, fills defaults and, unless cfg.AllowEviction is set,
// checks the server's eviction policy (CheckEviction, bounded by
// CheckTimeout): a server that may evict marks is refused with an
// *EvictionError; an unreachable server fails New with its error. ctx
// bounds that check together with CheckTimeout (the shorter wins). A nil
// ctx is refused with fence.ErrNilArgument before any I/O.
func New(ctx context.Context, cfg Config) (*Guard, error) {
	if ctx == nil {
		return nil, fmt.Errorf("redisguard: New with nil ctx: %w", fence.ErrNilArgument)
	}
	if cfg.Client == nil {
		return nil, configErr("Client", "nil", nil)
	}
	if cfg.MarkPrefix == "" {
		cfg.MarkPrefix = DefaultMarkPrefix
	}
	if err := fence.ValidateResource(cfg.MarkPrefix); err != nil || strings.ContainsAny(cfg.MarkPrefix, "{}") {
		return nil, configErr("MarkPrefix", fmt.Sprintf("%q: want a valid resource name without '{' or '}'", cfg.MarkPrefix), nil)
	}
	ttlArg := "0"
	switch {
	case cfg.TTL < 0 || (cfg.TTL > 0 && cfg.TTL < time.Millisecond):
		return nil, configErr("TTL", fmt.Sprintf("%v: want 0 or at least 1ms", cfg.TTL), nil)
	case cfg.TTL > 0:
		ttlArg = strconv.FormatInt(cfg.TTL.Milliseconds(), 10)
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{{"CheckTimeout", &cfg.CheckTimeout, DefaultCheckTimeout}, {"SettleTimeout", &cfg.SettleTimeout, DefaultSettleTimeout}} {
		if *d.v < 0 {
			return nil, configErr(d.name, fmt.Sprintf("%v is negative", *d.v), nil)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if err := engine.MaxAttemptsConfig(&cfg.MaxAttempts, "redisguard"); err != nil {
		return nil, err
	}
	switch {
	case cfg.DuplicateWindow == 0:
		cfg.DuplicateWindow = DefaultDuplicateWindow
	case cfg.DuplicateWindow < 10*time.Millisecond || cfg.DuplicateWindow%time.Millisecond != 0:
		return nil, configErr("DuplicateWindow", fmt.Sprintf("%v: want at least 10ms, in whole milliseconds", cfg.DuplicateWindow), nil)
	}
	rec, err := guardobs.New(guardobs.Config{Kind: "redis", Name: name,
		Retries:       "Redis writes sent again after a lost reply was settled as not applied.",
		MeterProvider: cfg.MeterProvider, TracerProvider: cfg.TracerProvider, Logger: cfg.Logger})
	if err != nil {
		return nil, configErr("MeterProvider", "instruments", err)
	}
	g := &Guard{client: cfg.Client, prefix: cfg.MarkPrefix, ttlArg: ttlArg, settleTimeout: cfg.SettleTimeout,
		now: time.Now, window: cfg.DuplicateWindow, windowArg: strconv.FormatInt(cfg.DuplicateWindow.Milliseconds(), 10)}
	g.eng = &engine.Engine{Args: engine.Args{Name: name, Strict: cfg.Strict, Rec: rec, Resource: g.checkResource},
		Driver: (*driver)(g), Op: "redisguard: write", MaxAttempts: cfg.MaxAttempts}
	if !cfg.AllowEviction {
		ctx, cancel := context.WithTimeout(ctx, cfg.CheckTimeout)
		defer cancel()
		if err := g.CheckEviction(ctx); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// CheckEviction reads the maxmemory-policy of every server the client
// writes to (INFO memory; every master of a cluster, every shard of a
// ring) and returns an *EvictionError for the first whose policy may evict
// keys without a TTL. The policy can be changed at run time (CONFIG SET);
// call it again whenever that may have happened.
func (g *Guard) CheckEviction(ctx context.Context) error {
	if ctx == nil {
		return g.eng.NilArgument("", "CheckEviction with nil ctx")
	}
	check := func(ctx context.Context, c *redis.Client) error {
		return checkPolicy(ctx, c, c.Options().Addr)
	}
	switch c := g.client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, check)
	case *redis.Ring:
		return c.ForEachShard(ctx, check)
	case *redis.Client:
		return check(ctx, c)
	default:
		return checkPolicy(ctx, c, "")
	}
}

func checkPolicy(ctx context.Context, c redis.Cmdable, addr string) error {
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return fmt.Errorf("redisguard: read the eviction policy of %s: %w", addr, err)
	}
	for _, line := range strings.Split(info, "\n") {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "maxmemory_policy:"); ok {
			if strings.HasPrefix(p, "allkeys-") {
				return &EvictionError{Addr: addr, Policy: p}
			}
			return nil
		}
	}
	return fmt.Errorf("redisguard: INFO memory of %s has no maxmemory_policy", addr)
}

// Put writes value to resource under the claim ctx carries
// (fence.ClaimFromContext; none: fence.ErrNoToken, nothing written; a
// claim from elsewhere goes in with fence.WithClaim). The value key is
// resource itself (SET, with PX Config.TTL when set); the mark key records
// the claim's token, its run (fence.NextMark) and the write's id. Both
// change in one script, or neither does: a token below the mark is refused
// with *fence.StaleError, the mark's token from another run with
// *fence.ReusedError.
func (g *Guard) Put(ctx context.Context, resource string, value []byte) error {
	return g.eng.Put(ctx, resource, value)
}

// Delete deletes resource's value under the claim ctx carries. The mark
// stays: it is what refuses older tokens afterwards.
func (g *Guard) Delete(ctx context.Context, resource string) error {
	return g.eng.Delete(ctx, resource)
}

// Get returns resource's value and its mark, read together in one script.
// A resource without value (never written, deleted, expired, or only
// fenced by a Fence that staged nothing) yields a *fence.NotFoundError carrying
// the mark's token; it matches fence.ErrNotFound.
func (g *Guard) Get(ctx context.Context, resource string) ([]byte, Info, error) {
	if err := g.eng.Read(ctx, resource); err != nil {
		return nil, Info{}, err
	}
	r, err := readScript.Run(ctx, g.client, []string{resource, g.markKey(resource)}).StringSlice()
	if err != nil {
		return nil, Info{}, fence.WrapContext(ctx, fmt.Errorf("redisguard: read %q: %w", resource, err))
	}
	if len(r) != 5 {
		return nil, Info{}, fmt.Errorf("redisguard: read %q: unexpected reply %q", resource, r)
	}
	switch r[0] {
	case "none":
		return nil, Info{}, &fence.NotFoundError{Source: "redisguard", Resource: resource}
	case "bad":
		return nil, Info{}, g.foreign(resource, r[1])
	}
	info, err := g.info(resource, r[2], r[3], r[4])
	if err != nil {
		return nil, Info{}, err
	}
	if r[0] == "novalue" {
		return nil, info, &fence.NotFoundError{Source: "redisguard", Resource: resource, Token: info.Token}
	}
	return []byte(r[1]), info, nil
}

// Mark returns resource's mark: the token and run identity of the last
// write admitted, or the zero Claim when none was.
func (g *Guard) Mark(ctx context.Context, resource string) (fence.Claim, error) {
	if err := g.eng.Read(ctx, resource); err != nil {
		return fence.Claim{}, err
	}
	key := g.markKey(resource)
	v, err := g.client.HMGet(ctx, key, "t", "r", "w").Result()
	if err != nil {
		if redis.HasErrorPrefix(err, "WRONGTYPE") {
			return fence.Claim{}, &fence.ForeignError{Source: "redisguard", Resource: resource, Key: key, Reason: "mark key is not a hash"}
		}
		return fence.Claim{}, fence.WrapContext(ctx, fmt.Errorf("redisguard: read mark of %q: %w", resource, err))
	}
	return g.markOf(resource, v)
}

// info parses a mark read from the server.
func (g *Guard) info(resource, tok, run, id string) (Info, error) {
	t, err := fence.Parse(tok)
	if err != nil || fence.ValidateRun(run) != nil {
		return Info{}, g.foreign(resource, "malformed mark")
	}
	return Info{Token: t, Run: run, WriteID: id}, nil
}

// foreign is the *fence.ForeignError of resource for reason: on the value key
// when reason is about it, on the mark key otherwise.
func (g *Guard) foreign(resource, reason string) error {
	key := g.markKey(resource)
	if strings.HasPrefix(reason, "value key") {
		key = resource
	}
	return &fence.ForeignError{Source: "redisguard", Resource: resource, Key: key, Reason: reason}
}
