package natsguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardobs"
	"github.com/fencekit/fencekit/guards/internal/engine"
)

// name prefixes the guard's errors and names it to the engine.
const name = "natsguard"

// Headers of the records natsguard writes. The record's body is the
// value, unchanged; its Nats-Msg-Id header (which the server stores) is
// the write id.
const (
	HeaderToken   = "Fencekit-Token"
	HeaderRun     = "Fencekit-Run"
	HeaderDeleted = "Fencekit-Deleted"
)

// Defaults of Config.
const (
	DefaultCheckTimeout  = 5 * time.Second
	DefaultReplyTimeout  = 5 * time.Second
	DefaultSettleTimeout = 5 * time.Second
	// DefaultMaxAttempts is Config.MaxAttempts's default, the same in
	// every guard that has the field.
	DefaultMaxAttempts = engine.DefaultMaxAttempts
	// MinDuplicateWindow is the shortest duplicate window of a bucket New
	// accepts: a write whose reply was lost is settled by sending it again
	// within this window, which the server answers as a duplicate if the
	// first copy was stored. New also requires the window to exceed
	// ReplyTimeout + 2 × SettleTimeout, the longest a re-send can follow
	// its first copy.
	MinDuplicateWindow = 30 * time.Second
)

// Config configures a Guard. Client and Bucket are required.
type Config struct {
	// Client is the JetStream context of the connection the Guard uses.
	Client jetstream.JetStream
	// Bucket is the key-value bucket (created by jetstream's
	// CreateKeyValue). Required.
	Bucket string
	// AllowExpiry accepts a bucket whose records expire (TTL / MaxAge), or
	// that discards old records when full: either can drop a mark, after
	// which older tokens are admitted again. New refuses such buckets
	// otherwise (*BucketError).
	AllowExpiry bool
	// CheckTimeout bounds New's lookup of the bucket. Default
	// DefaultCheckTimeout.
	CheckTimeout time.Duration
	// ReplyTimeout bounds how long a publish waits for its reply (within
	// the call's context) before the guard takes the reply as lost and
	// settles the write by re-sending it: a lost reply costs at most
	// ReplyTimeout + 2 × SettleTimeout, whatever the call's deadline.
	// Default DefaultReplyTimeout.
	ReplyTimeout time.Duration
	// SettleTimeout bounds each re-send of a write whose reply was lost (on
	// a fresh context, so it runs even when the call's context has ended).
	// Default DefaultSettleTimeout.
	SettleTimeout time.Duration
	// MaxAttempts bounds the conditional writes one call sends, each under
	// a fresh write id, the first included: a write that lost a race to
	// another writer is decided again and sent again while attempts remain
	// (the identical re-sends that settle a lost reply do not count). When
	// all lose, the call fails with an error matching fence.ErrBusy.
	// Default DefaultMaxAttempts.
	MaxAttempts int
	// MeterProvider records the guard instruments of package guardobs with
	// guard="nats", and fencekit.guard.nats.retries (conditional writes
	// retried after losing a race). Nil records nothing.
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

// Info describes a resource's mark: the claim of the last write admitted,
// its write id and the record's revision.
type Info struct {
	Token    fence.Token
	Run      string
	WriteID  string
	Revision uint64
}

// Guard fences writes to the keys of one JetStream key-value bucket. It is
// safe for concurrent use, also with other Guards over the same bucket. It
// starts no goroutine of its own; the connection stays the caller's.
type Guard struct {
	js            jetstream.JetStream
	nc            *nats.Conn
	kv            jetstream.KeyValue
	stream        jetstream.Stream
	bucket        string
	prefix        string // "$KV.<bucket>."
	replyTimeout  time.Duration
	settleTimeout time.Duration
	eng           *engine.Engine

	beforePublish func()          // tests: runs before each publish
	afterPublish  func(err error) // tests: runs after each publish returned

	mu    sync.Mutex
	cache map[string]state // key -> state after this Guard's last write to it
}

var _ fence.Guard = (*Guard)(nil)

// cacheMax bounds the keys a Guard remembers; the cache is emptied when
// full.
const cacheMax = 4096

// cached returns the state this Guard left key in, if it remembers it.
func (g *Guard) cached(key string) (state, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st, ok := g.cache[key]
	return st, ok
}

// remember records the state a write of this Guard left key in.
func (g *Guard) remember(key string, st state) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.cache) >= cacheMax {
		clear(g.cache)
	}
	g.cache[key] = st
}

func (g *Guard) forget(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.cache, key)
}

// New validates cfg, looks the bucket up (bounded by CheckTimeout) and
// returns a Guard. A bucket whose records may be dropped by the server
// (MaxAge, or DiscardOld with a size limit) is refused unless
// cfg.AllowExpiry is set, and one whose duplicate window is below
// MinDuplicateWindow, or not above ReplyTimeout + 2 × SettleTimeout, is
// refused always (*BucketError). A bucket that does not exist is a
// *BucketError too (matching jetstream.ErrBucketNotFound); a lookup that
// fails otherwise returns the client's error, wrapped. ctx bounds the
// lookup together with CheckTimeout (the shorter wins); once ctx has ended
// the error matches ctx.Err() and context.Cause(ctx). A nil ctx is refused
// with fence.ErrNilArgument before any I/O.
func New(ctx context.Context, cfg Config) (*Guard, error) {
	if ctx == nil {
		return nil, fmt.Errorf("natsguard: New with nil ctx: %w", fence.ErrNilArgument)
	}
	if cfg.Client == nil {
		return nil, configErr("Client", "nil", nil)
	}
	if cfg.Bucket == "" {
		return nil, configErr("Bucket", "empty", nil)
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{{"CheckTimeout", &cfg.CheckTimeout, DefaultCheckTimeout}, {"ReplyTimeout", &cfg.ReplyTimeout, DefaultReplyTimeout},
		{"SettleTimeout", &cfg.SettleTimeout, DefaultSettleTimeout}} {
		if *d.v < 0 {
			return nil, configErr(d.name, fmt.Sprintf("%v is negative", *d.v), nil)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if err := engine.MaxAttemptsConfig(&cfg.MaxAttempts, "natsguard"); err != nil {
		return nil, err
	}
	rec, err := guardobs.New(guardobs.Config{Kind: "nats", Name: name,
		Retries:       "JetStream conditional writes retried after another writer won the race (wrong last sequence).",
		MeterProvider: cfg.MeterProvider, TracerProvider: cfg.TracerProvider, Logger: cfg.Logger})
	if err != nil {
		return nil, configErr("MeterProvider", "instruments", err)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.CheckTimeout)
	defer cancel()
	bad := func(reason string) error { return &BucketError{Bucket: cfg.Bucket, Reason: reason} }
	kv, err := cfg.Client.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, &BucketError{Bucket: cfg.Bucket, Reason: "no such key-value bucket", Err: err}
	}
	if err != nil {
		return nil, fence.WrapContext(ctx, fmt.Errorf("natsguard: bucket %q: %w", cfg.Bucket, err))
	}
	stream, err := cfg.Client.Stream(ctx, "KV_"+cfg.Bucket)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, &BucketError{Bucket: cfg.Bucket, Reason: "no stream KV_" + cfg.Bucket, Err: err}
	}
	if err != nil {
		return nil, fence.WrapContext(ctx, fmt.Errorf("natsguard: bucket %q: %w", cfg.Bucket, err))
	}
	sc := stream.CachedInfo().Config
	switch {
	case sc.Duplicates < MinDuplicateWindow:
		return nil, bad(fmt.Sprintf("duplicate window %v is below %v", sc.Duplicates, MinDuplicateWindow))
	case sc.Duplicates <= cfg.ReplyTimeout+2*cfg.SettleTimeout:
		return nil, bad(fmt.Sprintf("duplicate window %v does not exceed ReplyTimeout + 2 × SettleTimeout (%v): a re-send could come too late to be recognised as a duplicate",
			sc.Duplicates, cfg.ReplyTimeout+2*cfg.SettleTimeout))
	case cfg.AllowExpiry:
	case sc.MaxAge > 0:
		return nil, bad(fmt.Sprintf("records expire after %v (set Config.AllowExpiry to accept lost marks)", sc.MaxAge))
	case sc.Discard == jetstream.DiscardOld && (sc.MaxMsgs > 0 || sc.MaxBytes > 0):
		return nil, bad("old records are discarded when the bucket is full (set Config.AllowExpiry to accept lost marks)")
	}
	g := &Guard{
		js: cfg.Client, nc: cfg.Client.Conn(), kv: kv, stream: stream, bucket: cfg.Bucket, prefix: "$KV." + cfg.Bucket + ".",
		replyTimeout: cfg.ReplyTimeout, settleTimeout: cfg.SettleTimeout, cache: map[string]state{},
		eng: &engine.Engine{Args: engine.Args{Name: name, Strict: cfg.Strict, Rec: rec},
			Op: "natsguard: publish", MaxAttempts: cfg.MaxAttempts},
	}
	g.eng.Driver = (*driver)(g)
	return g, nil
}

// Bucket returns the guard's bucket.
func (g *Guard) Bucket() string { return g.bucket }

// state is what a key's latest record says.
type state struct {
	seq     uint64 // revision of the latest record (a marker's too); 0: none
	info    Info   // the mark (zero when none is known)
	value   []byte
	present bool // the latest record is a value (not a tombstone or marker)
	deleted bool // the latest record is a tombstone or a delete/purge marker
}

// read returns the state of resource's key.
func (g *Guard) read(ctx context.Context, resource string) (state, error) {
	key := Key(resource)
	m, err := g.stream.GetLastMsgForSubject(ctx, g.prefix+key)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return state{}, nil
	}
	if err != nil {
		return state{}, fence.WrapContext(ctx, fmt.Errorf("natsguard: read %q: %w", resource, err))
	}
	if isMarker(m.Header) {
		info, err := g.markBefore(ctx, resource, key, m.Sequence)
		return state{seq: m.Sequence, info: info, deleted: true}, err
	}
	info, deleted, err := parse(resource, key, m)
	if err != nil {
		return state{}, err
	}
	return state{seq: m.Sequence, info: info, value: m.Data, present: !deleted, deleted: deleted}, nil
}

// isMarker reports a delete or purge marker (KV Delete / Purge by another
// client, or a server-side removal).
func isMarker(h nats.Header) bool {
	return h.Get("KV-Operation") != "" || h.Get(jetstream.MarkerReasonHeader) != ""
}

// markBefore finds the mark under a delete or purge marker at revision
// seq: the newest guard record in the key's history before it. None (the
// bucket keeps too little history, or a purge removed it): the zero Info.
func (g *Guard) markBefore(ctx context.Context, resource, key string, seq uint64) (Info, error) {
	hist, err := g.kv.History(ctx, key)
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return Info{}, fence.WrapContext(ctx, fmt.Errorf("natsguard: read history of %q: %w", resource, err))
	}
	for i := len(hist) - 1; i >= 0; i-- {
		e := hist[i]
		if e.Revision() >= seq || e.Operation() != jetstream.KeyValuePut {
			continue
		}
		m, err := g.stream.GetMsg(ctx, e.Revision())
		if err != nil {
			return Info{}, fence.WrapContext(ctx, fmt.Errorf("natsguard: read %q revision %d: %w", resource, e.Revision(), err))
		}
		info, _, err := parse(resource, key, m)
		return info, err
	}
	return Info{}, nil
}

// parse reads the guard's headers of a record.
func parse(resource, key string, m *jetstream.RawStreamMsg) (Info, bool, error) {
	bad := func(reason string) (Info, bool, error) {
		return Info{}, false, &fence.ForeignError{Source: "natsguard", Resource: resource, Key: key, Version: int64(m.Sequence), Reason: reason}
	}
	if len(m.Header.Values(HeaderToken)) != 1 {
		return bad("no " + HeaderToken + " header")
	}
	tok, err := fence.Parse(m.Header.Get(HeaderToken))
	if err != nil {
		return bad(err.Error())
	}
	run := m.Header.Get(HeaderRun)
	if err := fence.ValidateRun(run); err != nil {
		return bad(err.Error())
	}
	deleted := false
	switch m.Header.Get(HeaderDeleted) {
	case "":
	case "true":
		if len(m.Data) != 0 {
			return bad("tombstone with content")
		}
		deleted = true
	default:
		return bad("malformed " + HeaderDeleted + " header")
	}
	return Info{Token: tok, Run: run, WriteID: m.Header.Get(jetstream.MsgIDHeader), Revision: m.Sequence}, deleted, nil
}

// Put writes value to resource under the claim ctx carries
// (fence.ClaimFromContext; none: fence.ErrNoToken, nothing written; a
// claim from elsewhere goes in with fence.WithClaim): it reads the key's
// latest record, applies fence.DecideClaim to the mark its headers carry,
// and publishes the new record (value as the body; the token, run and
// write id as headers) with Nats-Expected-Last-Subject-Sequence set to the
// revision it read, so the write is stored only if no other write came in
// between; otherwise it reads and decides again.
func (g *Guard) Put(ctx context.Context, resource string, value []byte) error {
	return g.eng.Put(ctx, resource, value)
}

// Delete writes a tombstone for resource under the claim ctx carries: a
// record with no body and the header Fencekit-Deleted: true, which keeps
// the mark. (A KV Delete would leave a marker without a token.)
func (g *Guard) Delete(ctx context.Context, resource string) error {
	return g.eng.Delete(ctx, resource)
}

// Get returns resource's value and the mark written with it (one record).
// A resource without value yields a *fence.NotFoundError with the mark known;
// it matches fence.ErrNotFound.
func (g *Guard) Get(ctx context.Context, resource string) ([]byte, Info, error) {
	if err := g.eng.Read(ctx, resource); err != nil {
		return nil, Info{}, err
	}
	st, err := g.read(ctx, resource)
	switch {
	case err != nil:
		return nil, Info{}, err
	case !st.present:
		return nil, st.info, &fence.NotFoundError{Source: "natsguard", Resource: resource, Deleted: st.deleted, Token: st.info.Token}
	}
	return st.value, st.info, nil
}

// Mark returns resource's mark: the token and run identity of the last
// write admitted, or the zero Claim.
func (g *Guard) Mark(ctx context.Context, resource string) (fence.Claim, error) {
	if err := g.eng.Read(ctx, resource); err != nil {
		return fence.Claim{}, err
	}
	st, err := g.read(ctx, resource)
	return fence.Claim{Token: st.info.Token, Run: st.info.Run}, err
}

// driver is the Guard's part of the engine's fenced write.
type driver Guard

// attempt is one conditional publish: the key's state it decides on (read
// now, or remembered from this Guard's last write) and the record sent.
type attempt struct {
	g        *Guard
	resource string
	key      string
	st       state
	cached   bool
	msg      *nats.Msg
	tok      fence.Token
	run      string
}

// Open returns the state this Guard's last write left the key in when
// the engine accepts it (deciding on it is exact if the key has not
// changed since, which the conditional publish checks; a refusal on it is
// decided again on a fresh read), and reads the key otherwise.
func (d *driver) Open(ctx context.Context, resource string, read engine.Read) (engine.Attempt, error) {
	g := (*Guard)(d)
	a := &attempt{g: g, resource: resource, key: Key(resource)}
	if read == engine.ReadAny {
		if a.st, a.cached = g.cached(a.key); a.cached {
			return a, nil
		}
	}
	var err error
	a.st, err = g.read(ctx, resource)
	return a, err
}

func (a *attempt) Mark() (fence.Claim, bool, bool) {
	return fence.Claim{Token: a.st.info.Token, Run: a.st.info.Run}, true, a.cached
}

func (a *attempt) Close() {}

// Commit publishes the record of ch under the mark fence.NextMark gives,
// expecting the revision the attempt read. A mark-only change carries the
// value over (a tombstone when there is none).
func (a *attempt) Commit(ctx context.Context, c fence.Claim, ch engine.Change, id string) (engine.Result, error) {
	a.tok, a.run = fence.NextMark(c, a.st.info.Token, a.st.info.Run)
	m := nats.NewMsg(a.g.prefix + a.key)
	m.Header.Set(HeaderToken, a.tok.String())
	if a.run != "" {
		m.Header.Set(HeaderRun, a.run)
	}
	switch {
	case ch.Op == engine.OpPut:
		m.Data = ch.Value
	case ch.Op == engine.OpMark && a.st.present:
		m.Data = a.st.value
	default: // a deletion, or the mark alone over no value
		m.Header.Set(HeaderDeleted, "true")
	}
	a.msg = m
	res, seq, err := a.g.publish(ctx, m, a.st.seq, id)
	return a.result(ctx, res, seq, id, err)
}

// Settle sends the lost record again (see Guard.settle).
func (a *attempt) Settle(ctx context.Context, _ fence.Claim, _ engine.Change, id string, lost error) (engine.Result, error) {
	res, seq, err := a.g.settle(ctx, a.msg, a.st.seq, id, lost)
	if res == pubMaybeSent {
		a.g.forget(a.key)
		return engine.Failed, outcomeUnknown(ctx, a.resource, err)
	}
	return a.result(ctx, res, seq, id, err)
}

// result maps a publish's outcome, and remembers the state a stored
// write left.
func (a *attempt) result(ctx context.Context, res pubResult, seq uint64, id string, err error) (engine.Result, error) {
	switch res {
	case pubStored:
		next := state{seq: seq, info: Info{Token: a.tok, Run: a.run, WriteID: id, Revision: seq}}
		next.deleted = a.msg.Header.Get(HeaderDeleted) == "true"
		next.present = !next.deleted
		a.g.remember(a.key, next)
		return engine.Committed, nil
	case pubMaybeSent:
		return engine.Lost, err
	}
	a.g.forget(a.key)
	if res == pubConflict {
		return engine.Conflict, nil
	}
	return engine.Failed, fence.WrapContext(ctx, fmt.Errorf("natsguard: write %q: %w", a.resource, err))
}

// pubResult classifies a publish.
type pubResult int

const (
	pubStored    pubResult = iota // stored (or a duplicate of a stored copy)
	pubConflict                   // wrong last sequence: another write came in between
	pubMaybeSent                  // sent (or perhaps sent), no reply: may have been stored
	pubFailed                     // refused by the server, or failed before anything was sent
)

// notSent reports errors nats.go returns only before a request is written
// (validation, a draining connection, a full reconnect buffer).
// nats.ErrConnectionClosed is not one of them: nats.go also returns it for
// a request already sent when the connection closes before the reply.
func notSent(err error) bool {
	for _, e := range []error{nats.ErrBadSubject, nats.ErrMaxPayload, nats.ErrInvalidMsg, nats.ErrInvalidContext,
		nats.ErrInvalidConnection, nats.ErrHeadersNotSupported, nats.ErrConnectionDraining, nats.ErrReconnectBufExceeded,
		jetstream.ErrInvalidOption} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// publish sends m, expecting the key's latest revision to be expect, and
// waits at most ReplyTimeout (within ctx) for the reply.
func (g *Guard) publish(ctx context.Context, m *nats.Msg, expect uint64, id string) (pubResult, uint64, error) {
	if g.nc != nil && g.nc.IsClosed() {
		// Closed before this request: nothing is sent.
		return pubFailed, 0, nats.ErrConnectionClosed
	}
	if g.beforePublish != nil {
		g.beforePublish()
	}
	pctx, cancel := context.WithTimeout(ctx, g.replyTimeout)
	ack, err := g.js.PublishMsg(pctx, m, jetstream.WithExpectLastSequencePerSubject(expect), jetstream.WithMsgID(id))
	cancel()
	if g.afterPublish != nil {
		g.afterPublish(err)
	}
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		return pubStored, ack.Sequence, nil
	case errors.As(err, &apiErr):
		if apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant {
			return pubConflict, 0, err
		}
		return pubFailed, 0, err
	case errors.Is(err, jetstream.ErrNoStreamResponse), notSent(err):
		// No responders: the server answered that no stream took the
		// message, for every copy nats.go sent.
		return pubFailed, 0, err
	}
	return pubMaybeSent, 0, err
}

// settle sends a write whose reply was lost (first: the error that came
// instead) again, identical (same write id, same expected revision), on a
// fresh context bounded by SettleTimeout, twice at most. The server
// answers a duplicate if the first copy was stored (within the bucket's
// duplicate window), stores it now if nothing was, and refuses it as a
// conflict if another write came in between; either way the first copy
// can no longer be stored later. Any other answer settles nothing: the
// result stays pubMaybeSent. On a closed connection nothing can be sent.
func (g *Guard) settle(ctx context.Context, m *nats.Msg, expect uint64, id string, first error) (pubResult, uint64, error) {
	err := first
	for range 2 {
		if g.nc != nil && g.nc.IsClosed() {
			break
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.settleTimeout)
		res, seq, rerr := g.publish(sctx, m, expect, id)
		cancel()
		if res == pubStored || res == pubConflict {
			return res, seq, rerr
		}
		if res == pubMaybeSent {
			err = rerr
		}
	}
	return pubMaybeSent, 0, err
}
