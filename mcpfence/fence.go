package mcpfence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/leasetrace"
	"github.com/fencekit/fencekit/sql/migrations"
)

// Policy says how a tool's call obtains the conversation's lease.
type Policy uint8

const (
	// Acquire takes the lease if it is free and refuses the call with
	// CauseHeld (naming the holder) when another run holds it.
	Acquire Policy = iota + 1
	// Wait waits for the lease (lease.Manager.AcquireWait) for at most
	// Config.MaxWait, sending a progress notification every
	// Config.ProgressEvery when the call asked for progress; then CauseHeld.
	Wait
	// ContinueHere takes the lease over (lease.Manager.Takeover): the
	// newest device wins, and the run that held it is told at once (its
	// calls' ctx ends with lease.ErrTakenOver, they return CauseTakenOver).
	ContinueHere
	// Unfenced runs the tool without a lease and without reading any key:
	// for read-only tools. A server opts in per tool.
	Unfenced
)

func (p Policy) String() string {
	switch p {
	case Acquire:
		return "acquire"
	case Wait:
		return "wait"
	case ContinueHere:
		return "continue_here"
	case Unfenced:
		return "unfenced"
	default:
		return fmt.Sprintf("Policy(%d)", uint8(p))
	}
}

// Defaults of Config.
const (
	DefaultMaxWait        = 30 * time.Second
	DefaultProgressEvery  = time.Second
	DefaultRunIdle        = 2 * time.Minute
	DefaultReleaseTimeout = 5 * time.Second
)

// SpanToolCall is the span of one fenced tool call, from the key lookup to
// the result; the lease's spans (acquire, takeover, release) and the
// guards' spans of the tool's writes are its children (a per-call lease's
// release span may end after it: the release runs after the result).
const SpanToolCall = "fencekit.mcp.tool_call"

// Span attribute keys of SpanToolCall (with leasetrace.AttrAccountID,
// leasetrace.AttrSessionID, leasetrace.AttrRunID, leasetrace.AttrToken,
// leasetrace.AttrHolder).
const (
	AttrTool    = "fencekit.mcp.tool"
	AttrPolicy  = "fencekit.mcp.policy"
	AttrRun     = "fencekit.mcp.run"     // the MetaRun id
	AttrOutcome = "fencekit.mcp.outcome" // "ok", "tool_error" or a Cause*
)

// Config configures a Fence. Manager and Account are required.
type Config struct {
	// Manager grants the conversations' leases: a *lease.Manager, or a
	// *leaseops.Router over several lease databases (any lease.Leaser).
	Manager lease.Leaser
	// Conversation finds a call's conversation, the SessionID of its
	// lease.Key. Default FromMeta(MetaConversation).
	Conversation KeySource
	// Account finds the account, the AccountID of the key: from the
	// server's auth (req.Extra.TokenInfo over HTTP), from the request
	// (FromMeta(MetaAccount)) or fixed (Fixed). Required.
	Account KeySource
	// Authorize is the membership check: it runs for every fenced call,
	// after the key is known and before any lease statement, and a non-nil
	// error refuses the call with CauseUnauthorized. Nil admits every
	// caller (the Manager's own Authorizer, if any, still runs).
	Authorize func(ctx context.Context, req *mcp.CallToolRequest, key lease.Key) error
	// CheckKey checks the names the server's tools derive from a call's
	// key, before any lease statement: each guard resource a fenced tool
	// writes (fence.ValidateResource of key.Resource(name), and a guard's
	// own rules such as fileguard.ValidateResource). A non-nil error
	// refuses the call with CauseInvalidMeta. The lease key and the claim's
	// scope are always checked.
	CheckKey func(key lease.Key) error
	// Holder labels the grants (lease.WithHolder): the name clients see in
	// Owner. Default: the client's name, from its initialize request or,
	// on a revision without initialize (Revision20260728), from the
	// request's _meta (mcp.MetaKeyClientInfo).
	Holder func(ctx context.Context, req *mcp.CallToolRequest) string
	// Tools maps tool names to their policy; Default applies to the others.
	Tools map[string]Policy
	// Default is the policy of tools Tools does not name. Zero: none, a
	// call of a tool Tools does not name is refused with CauseUnknownTool
	// before anything else (a tool the server added but nobody classified
	// is never run unfenced, nor fenced by accident).
	Default Policy
	// MaxWait bounds a Wait call's wait. Default DefaultMaxWait.
	MaxWait time.Duration
	// ProgressEvery is the period of a Wait call's progress notifications.
	// Default DefaultProgressEvery.
	ProgressEvery time.Duration
	// RunIdle is how long a run's lease waits, parked in the database
	// between two of its calls, for its next call (on any replica) before
	// it expires. At most lease.MaxParkIdle. Default DefaultRunIdle.
	RunIdle time.Duration
	// ReleaseTimeout bounds each release, which runs on a context of its
	// own (not the possibly cancelled call's). Default DefaultReleaseTimeout.
	ReleaseTimeout time.Duration
	// RunCache lets a later call of a run skip the lease statements on
	// its path when this Fence served the run's previous call: after a
	// call of a run parked it here, the Fence keeps the run (its token)
	// and a lease.Watcher of its conversation, and a later call of the
	// run on this Fence runs its tool at once, without Resume before it
	// nor Park after it, for as long as the park is trusted (RunIdle −
	// RunIdle/5 after the park statement was sent) and the watch has not
	// reported the run's end. The run's parked expiry is pushed forward
	// in the background (Resume then Park, at most once per RunIdle/10
	// while calls come). A cached call learns that another replica ended
	// the run, or that another device took the conversation over, from
	// the watch (a notification, or its safety-net poll, 1s by default),
	// not from a statement of its own: see the package documentation.
	// Default false: every later call resumes the run (one statement) and
	// parks it again (another).
	RunCache bool
	// ReleaseBeforeReply makes a per-call lease's release finish before the
	// call's result is returned. By default the release is sent when the
	// tool returns and the result goes back without waiting for its commit:
	// a later call of the same conversation through this Fence waits for
	// it (Acquire and Wait), but a call through another Fence (another
	// server replica) that arrives within the release's round trip finds
	// the conversation still held. Set it when clients must find a
	// conversation free as soon as a call's result arrived, wherever their
	// next call goes.
	ReleaseBeforeReply bool
	// Requests is the lease database (the pool of the Manager's leases,
	// where the migration sets lease and mcp are applied, in schema
	// RequestSchema): it keeps the results of calls that name a request id
	// (MetaRequest). Nil: a fenced call that names one is refused with
	// CauseInvalidMeta, as this server cannot answer a duplicate. With a
	// Manager over several databases (a leaseops.Router) it must be the
	// database of every key its calls name.
	Requests *pgxpool.Pool
	// RequestSchema is the schema of fencekit_mcp_requests and of the
	// lease table. Default migrations.DefaultSchema; it must pass
	// migrations.ValidateIdentifier.
	RequestSchema string
	// RequestRetention is how long a request's result is kept: a duplicate
	// that arrives later runs as a new call. Rows are deleted, at most 64
	// at a time, by later claims of request ids. It must exceed the longest
	// call. Default DefaultRequestRetention, at least MinRequestRetention.
	RequestRetention time.Duration
	// TracerProvider records one SpanToolCall per fenced call. Nil: none.
	TracerProvider trace.TracerProvider
	// Logger receives a Warn record for a release that failed. Nil discards.
	Logger *slog.Logger
}

// Fence fences the tool calls of MCP servers: install Middleware with
// mcp.Server.AddReceivingMiddleware. It is safe for concurrent use, also by
// several servers (one per streamable-HTTP session, say). Close stops it.
type Fence struct {
	cfg    Config
	tracer trace.Tracer

	mu        sync.Mutex
	runs      map[uuid.UUID]*run            // the runs with calls running here
	cache     map[lease.Key]*cachedRun      // the run cache (Config.RunCache): at most one run per key
	releasing map[lease.Key][]chan struct{} // per-call releases in flight, closed when done
	closed    bool
	bg        sync.WaitGroup // the goroutines of releases in flight
	cacheWG   sync.WaitGroup // the goroutines of the run cache's entries

	http httpCalls // the POSTs in flight of HTTPHandler
}

// New validates cfg and fills its defaults (a zero duration takes its
// default). A missing Manager or Account, an invalid policy, a negative
// duration or a RunIdle above lease.MaxParkIdle is a *fence.ConfigError
// (Source "mcpfence") matching fence.ErrInvalidConfig, as is an invalid
// RequestSchema or a RequestRetention below MinRequestRetention. A Fence starts no
// goroutine of its own but, with Config.RunCache, two per cached run (its
// watcher and its clock), which end with the entry or at Close.
func New(cfg Config) (*Fence, error) {
	bad := func(field, reason string) (*Fence, error) {
		return nil, &fence.ConfigError{Source: "mcpfence", Field: field, Reason: reason}
	}
	if cfg.Manager == nil {
		return bad("Manager", "required")
	}
	if cfg.Account == nil {
		return bad("Account", "required")
	}
	for name, p := range cfg.Tools {
		if p < Acquire || p > Unfenced {
			return bad(fmt.Sprintf("Tools[%q]", name), fmt.Sprintf("invalid policy %d", p))
		}
	}
	if cfg.Default > Unfenced {
		return bad("Default", fmt.Sprintf("invalid policy %d", cfg.Default))
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"MaxWait", cfg.MaxWait}, {"ProgressEvery", cfg.ProgressEvery}, {"RunIdle", cfg.RunIdle}, {"ReleaseTimeout", cfg.ReleaseTimeout}, {"RequestRetention", cfg.RequestRetention}} {
		if d.v < 0 {
			return bad(d.field, "negative: "+d.v.String()+" (zero takes the default)")
		}
	}
	if cfg.Conversation == nil {
		cfg.Conversation = FromMeta(MetaConversation)
	}
	if cfg.Holder == nil {
		cfg.Holder = clientName
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = DefaultMaxWait
	}
	if cfg.ProgressEvery == 0 {
		cfg.ProgressEvery = DefaultProgressEvery
	}
	if cfg.RunIdle == 0 {
		cfg.RunIdle = DefaultRunIdle
	} else if cfg.RunIdle > lease.MaxParkIdle {
		return bad("RunIdle", fmt.Sprintf("%s: a run waits between its calls as a parked grant, at most lease.MaxParkIdle (%s)", cfg.RunIdle, lease.MaxParkIdle))
	}
	if cfg.ReleaseTimeout == 0 {
		cfg.ReleaseTimeout = DefaultReleaseTimeout
	}
	if cfg.RequestSchema == "" {
		cfg.RequestSchema = migrations.DefaultSchema
	}
	if err := migrations.ValidateIdentifier(cfg.RequestSchema); err != nil {
		return bad("RequestSchema", err.Error())
	}
	if cfg.RequestRetention == 0 {
		cfg.RequestRetention = DefaultRequestRetention
	} else if cfg.RequestRetention < MinRequestRetention {
		return bad("RequestRetention", fmt.Sprintf("%s: at least %s (it must exceed the longest call)", cfg.RequestRetention, MinRequestRetention))
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	f := &Fence{cfg: cfg, runs: map[uuid.UUID]*run{}, cache: map[lease.Key]*cachedRun{}, releasing: map[lease.Key][]chan struct{}{}}
	if cfg.TracerProvider != nil {
		f.tracer = cfg.TracerProvider.Tracer("github.com/fencekit/fencekit")
	}
	return f, nil
}

// clientName is the default Holder: the name the client gave at
// initialize, or in the request's _meta.
func clientName(_ context.Context, req *mcp.CallToolRequest) string {
	var name string
	if req.Params != nil {
		if ci, ok := req.Params.Meta[mcp.MetaKeyClientInfo].(map[string]any); ok {
			name, _ = ci["name"].(string)
		}
	}
	if name == "" && req.Session != nil {
		if p := req.Session.InitializeParams(); p != nil && p.ClientInfo != nil {
			name = p.ClientInfo.Name
		}
	}
	if lease.ValidateHolder(name) != nil {
		return ""
	}
	return name
}

// Policy returns the policy of the tool named name: its Config.Tools
// entry, else Config.Default; 0 when the Fence knows no policy for it (its
// calls are refused with CauseUnknownTool).
func (f *Fence) Policy(name string) Policy {
	if p, ok := f.cfg.Tools[name]; ok {
		return p
	}
	return f.cfg.Default
}

// Middleware fences every tools/call the server receives according to the
// tool's Policy and passes every other request through. Install it with
// server.AddReceivingMiddleware(f.Middleware).
func (f *Fence) Middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method == "tools/list" {
			res, err := next(ctx, method, req)
			if lr, ok := res.(*mcp.ListToolsResult); ok && err == nil {
				f.widenOutputSchemas(lr)
			}
			return res, err
		}
		ctr, ok := req.(*mcp.CallToolRequest)
		if method != "tools/call" || !ok || ctr.Params == nil {
			return next(ctx, method, req)
		}
		policy := f.Policy(ctr.Params.Name)
		if policy == 0 {
			r := Refusal{Cause: CauseUnknownTool, Tool: ctr.Params.Name,
				Message: fmt.Sprintf("the server's fence has no policy for tool %q: nothing ran", ctr.Params.Name)}
			return completeOnNewRevision(ctr, r.result()), nil
		}
		if policy == Unfenced {
			return next(ctx, method, req)
		}
		res, err := f.call(ctx, policy, ctr, func(ctx context.Context) (mcp.Result, error) { return next(ctx, method, req) })
		return completeOnNewRevision(ctr, res), err
	}
}

// completeOnNewRevision gives a result the Fence built itself (a Refusal)
// the resultType "complete" that a 2026-07-28 client requires: the SDK sets
// it only on its own tool handlers' results, through an unexported field
// that only JSON decoding reaches from here.
func completeOnNewRevision(req *mcp.CallToolRequest, res mcp.Result) mcp.Result {
	r, ok := res.(*mcp.CallToolResult)
	if !ok || r == nil || !r.IsError || req.Params == nil {
		return res
	}
	if v, _ := req.Params.Meta[mcp.MetaKeyProtocolVersion].(string); v < Revision20260728 {
		return res
	}
	var c mcp.CallToolResult
	if err := json.Unmarshal([]byte(`{"resultType":"complete"}`), &c); err != nil {
		return res
	}
	c.Meta, c.Content, c.StructuredContent, c.InputRequests, c.RequestState = r.Meta, r.Content, r.StructuredContent, r.InputRequests, r.RequestState
	if e := r.GetError(); e != nil {
		c.SetError(e)
	}
	c.IsError = true
	return &c
}

// Close refuses new fenced calls (CauseUnavailable) and waits for the
// per-call releases in flight. Calls still running keep their leases until
// they return: a per-call lease is then released before the result, a
// run's is parked as always. Runs live in the database between their
// calls, so they outlive Close: a later call continues each on another
// Fence (another replica, or this server restarted) for as long as RunIdle
// allows. With Config.RunCache, Close stops the run cache: every cached
// run's watcher and clock end, and a run with calls since its last park
// is extended once more (Resume, then Park for RunIdle); a cached call
// still running keeps its claim until it returns, no longer told of its
// run's end (guards still refuse its writes once a newer token wrote). It
// is idempotent and returns nil.
func (f *Fence) Close() error {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.closeCache()
	f.bg.Wait()
	return nil
}

// call runs one fenced tool call.
//
//nolint:contextcheck // the handler's ctx also ends with the lease (or cached run) and with the client
func (f *Fence) call(ctx context.Context, policy Policy, req *mcp.CallToolRequest, next func(context.Context) (mcp.Result, error)) (res mcp.Result, err error) {
	tool := req.Params.Name
	var span trace.Span
	if f.tracer != nil {
		ctx, span = f.tracer.Start(ctx, SpanToolCall, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String(AttrTool, tool), attribute.String(AttrPolicy, policy.String())))
		defer func() {
			outcome := "ok"
			if r, ok := res.(*mcp.CallToolResult); ok && r != nil && r.IsError {
				outcome = "tool_error"
				var re *RefusalError
				if errors.As(r.GetError(), &re) {
					outcome = re.Refusal.Cause
				}
			}
			if err != nil {
				outcome = "error"
				span.SetStatus(codes.Error, err.Error())
			}
			span.SetAttributes(attribute.String(AttrOutcome, outcome))
			span.End()
		}()
	}
	refuse := func(r Refusal) (mcp.Result, error) {
		r.Tool = tool
		return r.result(), nil
	}
	if gone := f.clientGone(req); gone != nil {
		// Served by HTTPHandler: the call ends when its client is gone.
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		stop := context.AfterFunc(gone, func() { cancel(context.Cause(gone)) }) //nolint:contextcheck // the client's going ends the call's ctx
		defer stop()
	}

	key, rm, refusal := f.key(ctx, req)
	if refusal != nil {
		return refuse(*refusal)
	}
	if span != nil {
		span.SetAttributes(attribute.String(leasetrace.AttrAccountID, key.AccountID), attribute.String(leasetrace.AttrSessionID, key.SessionID))
		if rm.id != uuid.Nil {
			span.SetAttributes(attribute.String(AttrRun, rm.id.String()))
		}
	}
	if f.cfg.Authorize != nil {
		if aerr := f.cfg.Authorize(ctx, req, key); aerr != nil {
			return refuse(Refusal{Cause: CauseUnauthorized, Message: aerr.Error(), Conversation: key.SessionID})
		}
	}

	f.mu.Lock()
	closed := f.closed
	f.mu.Unlock()
	if closed {
		return refuse(Refusal{Cause: CauseUnavailable, Message: "the server is shutting down", Conversation: key.SessionID})
	}
	if rm.request != nil {
		// A request id already used in this conversation: the first call's
		// result, never a second execution.
		row, lerr := f.lookupRequest(ctx, key, rm.request)
		if lerr != nil {
			return refuse(Refusal{Cause: CauseUnavailable, Message: lerr.Error() + ": nothing ran", Conversation: key.SessionID})
		}
		if row != nil {
			return f.replay(ctx, req, key, rm.request, row, refuse)
		}
	}
	if f.cfg.RunCache && rm.id != uuid.Nil && !rm.start && !rm.end && rm.request == nil {
		if e := f.useCached(key, rm.id, f.cfg.Holder(ctx, req)); e != nil {
			defer f.leaveCached(e)
			return f.runCached(ctx, e, key, tool, span, refuse, next)
		}
	}
	var (
		l      *lease.Lease
		handle string // the run's handle, for LeaseInfo.Run
	)
	if rm.start || rm.id != uuid.Nil {
		var (
			r       *run
			refusal *Refusal
		)
		if rm.start {
			r, refusal = f.startRun(ctx, policy, req, key)
		} else {
			r, refusal = f.joinRun(ctx, req, key, rm.id)
		}
		if refusal != nil {
			return f.refuseOrReplay(ctx, req, key, rm.request, *refusal, refuse)
		}
		l, handle = r.l, r.id.String()
		defer func() {
			// A run whose first call did not succeed is released, not
			// parked: nobody holds its handle.
			failed := rm.start && (err != nil || isError(res))
			f.leaveRun(ctx, r, rm.end, failed)
		}()
	} else {
		var refusal *Refusal
		l, refusal = f.obtain(ctx, policy, req, key)
		if refusal != nil {
			return f.refuseOrReplay(ctx, req, key, rm.request, *refusal, refuse)
		}
		defer f.releaseCall(ctx, l)
	}
	if ctx.Err() != nil {
		// The client went (or cancelled) while the lease was being granted:
		// the tool never starts, and the lease is released as the call
		// returns.
		return refuse(Refusal{Cause: CauseCanceled, Message: fmt.Sprintf("the call ended before its tool ran: %v", context.Cause(ctx)),
			Conversation: key.SessionID, Token: l.Token()})
	}
	if rm.request != nil {
		// Claimed while the lease is held (checked in the same
		// transaction); a row that appeared since the lookup is answered
		// as a duplicate.
		claimed, cerr := f.claimRequest(ctx, key, rm.request, l)
		if cerr != nil {
			return refuse(*requestError(ctx, key, l, cerr))
		}
		if !claimed {
			row, lerr := f.lookupRequest(ctx, key, rm.request)
			if lerr != nil {
				return refuse(Refusal{Cause: CauseUnavailable, Message: lerr.Error() + ": nothing ran", Conversation: key.SessionID})
			}
			return f.replay(ctx, req, key, rm.request, row, refuse)
		}
		defer func() { f.finishRequest(ctx, key, rm.request, l, res, err) }()
	}
	if span != nil {
		span.SetAttributes(attribute.String(leasetrace.AttrRunID, l.RunID().String()),
			attribute.Int64(leasetrace.AttrToken, int64(l.Token())), attribute.String(leasetrace.AttrHolder, l.Holder()))
	}

	// The handler's ctx: this request's values and cancellation, the lease's
	// claim, and the lease's end (with its cause).
	// The lease's ctx carries its claim (token, run, the key's scope).
	claim, _ := fence.ClaimFromContext(l.Context())
	hctx, cancel := context.WithCancelCause(fence.WithClaim(ctx, claim))
	defer cancel(nil)
	stopAfter := context.AfterFunc(l.Context(), func() { cancel(context.Cause(l.Context())) }) //nolint:contextcheck // the lease's end ends the handler's ctx
	defer stopAfter()

	res, err = next(hctx)
	info := LeaseInfo{Conversation: key.SessionID, Token: claim.Token, Holder: l.Holder(), RunID: claim.Run, Run: handle}
	return f.classify(ctx, hctx, l.Context(), key, info, tool, res, err)
}

// runCached runs a later call of a cached run (Config.RunCache): no lease
// statement, the run's claim, and a ctx that ends when the entry is
// invalidated (the watch saw the run end, or its trust deadline passed).
func (f *Fence) runCached(ctx context.Context, e *cachedRun, key lease.Key, tool string, span trace.Span,
	refuse func(Refusal) (mcp.Result, error), next func(context.Context) (mcp.Result, error)) (mcp.Result, error) {
	if ctx.Err() != nil {
		return refuse(Refusal{Cause: CauseCanceled, Message: fmt.Sprintf("the call ended before its tool ran: %v", context.Cause(ctx)),
			Conversation: key.SessionID, Token: e.claim.Token})
	}
	if span != nil {
		span.SetAttributes(attribute.String(leasetrace.AttrRunID, e.claim.Run),
			attribute.Int64(leasetrace.AttrToken, int64(e.claim.Token)), attribute.String(leasetrace.AttrHolder, e.holder))
	}
	hctx, cancel := context.WithCancelCause(fence.WithClaim(ctx, e.claim))
	defer cancel(nil)
	stopAfter := context.AfterFunc(e.ended, func() { cancel(context.Cause(e.ended)) }) //nolint:contextcheck // the cached run's end ends the handler's ctx
	defer stopAfter()
	res, err := next(hctx)
	info := LeaseInfo{Conversation: key.SessionID, Token: e.claim.Token, Holder: e.holder, RunID: e.claim.Run, Run: e.claim.Run}
	return f.classify(ctx, hctx, e.ended, key, info, tool, res, err)
}

// replay answers a call whose request id has a row (awaitRequest).
func (f *Fence) replay(ctx context.Context, req *mcp.CallToolRequest, key lease.Key, rq *requestCall, row *requestRow, refuse func(Refusal) (mcp.Result, error)) (mcp.Result, error) {
	res, refusal := f.awaitRequest(ctx, req, key, rq, row)
	if refusal != nil {
		return refuse(*refusal)
	}
	return res, nil
}

// refuseOrReplay refuses a call that did not obtain the lease, unless it
// names a request id whose first call claimed it meanwhile (and so holds
// the conversation): then the call is that request's duplicate.
func (f *Fence) refuseOrReplay(ctx context.Context, req *mcp.CallToolRequest, key lease.Key, rq *requestCall, r Refusal, refuse func(Refusal) (mcp.Result, error)) (mcp.Result, error) {
	if rq != nil && (r.Cause == CauseHeld || r.Cause == CauseTakenOver || r.Cause == CauseRunEnded) {
		if row, err := f.lookupRequest(ctx, key, rq); err == nil && row != nil {
			return f.replay(ctx, req, key, rq, row, refuse)
		}
	}
	return refuse(r)
}

// key reads a call's key and run metadata and checks every name the key
// becomes (the lease key, the claim's scope, Config.CheckKey's names)
// before any lease statement.
func (f *Fence) key(ctx context.Context, req *mcp.CallToolRequest) (lease.Key, runMeta, *Refusal) {
	conv, err := f.cfg.Conversation(ctx, req)
	if err != nil {
		return lease.Key{}, runMeta{}, metaRefusal(err, "conversation", "")
	}
	acct, err := f.cfg.Account(ctx, req)
	if err != nil {
		if errors.Is(err, ErrNoKey) || errors.Is(err, ErrInvalidMeta) {
			return lease.Key{}, runMeta{}, metaRefusal(err, "account", conv)
		}
		return lease.Key{}, runMeta{}, &Refusal{Cause: CauseUnauthorized, Message: err.Error(), Conversation: conv}
	}
	key := lease.Key{AccountID: acct, SessionID: conv}
	if err := f.checkKey(key); err != nil {
		return key, runMeta{}, &Refusal{Cause: CauseInvalidMeta, Message: err.Error()}
	}
	rm, err := parseRun(req)
	if err == nil {
		rm.request, err = parseRequest(req)
	}
	if err == nil && rm.request != nil && f.cfg.Requests == nil {
		err = &MetaError{Field: MetaRequest, Reason: "this server keeps no request results (its Fence has no Config.Requests): the call was not run"}
	}
	if err != nil {
		return key, rm, &Refusal{Cause: CauseInvalidMeta, Message: err.Error(), Conversation: conv}
	}
	return key, rm, nil
}

// checkKey checks every name key becomes: the lease key itself, the claim
// scope the lease's ctx carries (which guards check), and the server's own
// names (Config.CheckKey). An id accepted here never fails later for its
// length or its bytes, after a lease statement was sent or a write
// committed.
func (f *Fence) checkKey(key lease.Key) error {
	if err := key.Validate(); err != nil {
		return err
	}
	if err := fence.ValidateScope(key.Scope()); err != nil {
		return fmt.Errorf("mcpfence: the conversation's claim scope: %w", err)
	}
	if f.cfg.CheckKey != nil {
		if err := f.cfg.CheckKey(key); err != nil {
			return fmt.Errorf("mcpfence: the conversation's names: %w", err)
		}
	}
	return nil
}

func metaRefusal(err error, what, conv string) *Refusal {
	if errors.Is(err, ErrNoKey) {
		where := "its key source"
		var nk *noKeyError
		if errors.As(err, &nk) {
			where = nk.where
		}
		return &Refusal{Cause: CauseNoKey, Conversation: conv,
			Message: fmt.Sprintf("the call names no %s (this tool is fenced: looked in %s)", what, where)}
	}
	return &Refusal{Cause: CauseInvalidMeta, Message: err.Error(), Conversation: conv}
}

// classify turns the handler's outcome into the call's result: errors that
// say the lease ended (held, the lease's Context; a cached run, its
// entry's end) or a guard refused become Refusals; a successful result
// gets MetaLease.
func (f *Fence) classify(ctx, hctx, held context.Context, key lease.Key, info LeaseInfo, tool string, res mcp.Result, err error) (mcp.Result, error) {
	ctr, _ := res.(*mcp.CallToolResult)
	cause := err
	if err == nil && ctr != nil && ctr.IsError {
		cause = ctr.GetError()
	}
	if cause == nil {
		if ctr != nil {
			if ctr.Meta == nil {
				ctr.Meta = mcp.Meta{}
			}
			ctr.Meta[MetaLease] = info
		}
		return res, err
	}
	r := Refusal{Tool: tool, Conversation: info.Conversation, Token: info.Token, Message: cause.Error()}
	ended := held.Err() != nil && ctx.Err() == nil // the lease ended, the request did not
	if se, ok := fence.IsStale(cause); ok {
		r.Cause, r.Presented, r.Highest, r.Resource, r.Overtaken = CauseStale, se.Presented, se.Highest, se.Resource, se.Overtaken
		r.Owner = f.owner(ctx, key)
		return r.result(), nil
	}
	if oe, ok := fence.IsOutcomeUnknown(cause); ok {
		r.Cause, r.Resource = CauseOutcomeUnknown, oe.Resource
		return r.result(), nil
	}
	if ended && (errors.Is(cause, context.Canceled) || errors.Is(cause, lease.ErrTakenOver) ||
		errors.Is(cause, lease.ErrLost) || errors.Is(cause, lease.ErrTrustExpired) || errors.Is(cause, lease.ErrClosed) ||
		errors.Is(hctx.Err(), context.Canceled)) {
		r = f.endedRefusal(ctx, context.Cause(held), key, r)
		return r.result(), nil
	}
	return res, err
}

// isError reports whether res is an error result.
func isError(res mcp.Result) bool {
	r, ok := res.(*mcp.CallToolResult)
	return ok && r != nil && r.IsError
}

// endedRefusal fills r for a call whose lease ended under it with cause.
func (f *Fence) endedRefusal(ctx context.Context, cause error, key lease.Key, r Refusal) Refusal {
	switch {
	case errors.Is(cause, lease.ErrTakenOver):
		r.Cause = CauseTakenOver
		r.Message = "another device took the conversation over (continue here); this call was stopped"
		r.Owner = f.owner(ctx, key)
	case errors.Is(cause, lease.ErrReleased):
		r.Cause = CauseRunEnded
		r.Message = "the run's lease was released"
	default:
		r.Cause = CauseLost
		r.Message = fmt.Sprintf("the lease ended: %v", cause)
		r.Owner = f.owner(ctx, key)
	}
	return r
}

// owner asks the database for key's last grant (one statement); nil when
// it cannot tell.
func (f *Fence) owner(ctx context.Context, key lease.Key) *Owner {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.cfg.ReleaseTimeout)
	defer cancel()
	o, err := f.cfg.Manager.Inspect(ctx, key)
	if err != nil {
		return nil
	}
	return ownerOf(o)
}

// refusalSchema is the JSON schema of a Refusal (the fields every one has).
var refusalSchema = map[string]any{
	"type":     "object",
	"required": []any{"cause", "message"},
	"properties": map[string]any{
		"cause":   map[string]any{"type": "string"},
		"message": map[string]any{"type": "string"},
	},
}

// widenOutputSchemas lets the output schema of every fenced tool in a
// tools/list result admit a Refusal as well: clients that validate an error
// result's structured content against the tool's output schema (the
// TypeScript SDK does) then accept a refusal. The server's tools are not
// changed; lr gets copies.
func (f *Fence) widenOutputSchemas(lr *mcp.ListToolsResult) {
	for i, t := range lr.Tools {
		if t == nil || t.OutputSchema == nil || f.Policy(t.Name) == Unfenced {
			continue
		}
		tt := *t
		tt.OutputSchema = map[string]any{"type": "object", "anyOf": []any{t.OutputSchema, refusalSchema}}
		lr.Tools[i] = &tt
	}
}
