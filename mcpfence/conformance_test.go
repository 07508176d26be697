//go:build unix

package mcpfence_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/guards/fileguard"
	"github.com/fencekit/fencekit/guards/guardtest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/mcpfence"
	"github.com/fencekit/fencekit/sql/migrations"
)

// The conformance kit with the guard used inside MCP tool handlers: every
// write of every kit check is a tools/call (Go SDK client, in-memory
// transport) to a server fenced by mcpfence; the tool's handler takes the
// claim from its ctx (the lease's: token, run id, key's scope) and writes
// through fileguard's ctx-first form; every read is a call of an unfenced
// tool. Nothing of a check bypasses MCP.
//
// The kit dictates tokens (5, then 3, MaxInt64, ...), and a lease's token
// comes from the lease schema's sequence. So the subject asks for token T
// by naming the conversation "<subject>.t<T>", and the lease Manager's
// Authorizer, which runs right before the acquire statement, sets the
// sequence so that this grant draws T (setval; acquisitions are serialised
// from the Authorizer until the grant came back, the guarded writes are
// not). Every conversation is acquired once: its token is the one the
// statement really granted, and the handler refuses to write when the
// claim in its ctx carries another.
//
// Writes of the same kit token share one lease: the conversation's calls
// are one mcpfence run, so they carry the same token and run id, as the
// kit's run-less writes of one token must (a retry under the same claim). A
// per-call lease would give each of them a run id of its own, and the guard
// would rightly refuse the second as a reused token. The subject starts
// each conversation's run with a call of kit_begin (MetaRunStart, a tool
// that writes nothing, so that a kit write that fails is never a run's
// first call, which would end the run) and presents the returned handle
// (MetaRun) with every write.
//
// Errors cross the wire as results: a stale write is mcpfence's Refusal
// (cause "stale", both tokens, the resource), decoded back into a
// *fence.StaleError; the handler reports the guard's other errors by kind
// (kitError), decoded into errors matching the same fence sentinel.
//
// The checks that do not apply, and why, are kitNotApplicable.

// kitNotApplicable: the kit checks this path cannot express.
var kitNotApplicable = map[string]string{
	"InvalidTokensRejected": "a lease never grants a token <= 0, so no tool handler's ctx carries one (the guard's own conformance test covers it)",
	"ContextFormMatchesWrite": "it presents hand-made claims (token 0 and -4, a malformed run, runs named run-a/run-b); " +
		"a tool handler's claim is the lease's: a positive token and the lease's run id",
	"TokenReuseRefused": "it presents claims without a run and with kit-named runs; every claim mcpfence hands a tool carries " +
		"its lease's run id (TestKitTokenReuseAcrossLeases checks reuse between two leases of one token instead)",
	"StrictScopeRefused": "it presents scopes of its own (six path segments); a tool handler's scope is its lease key's " +
		"(account/conversation, fence.JoinResource escapes the ids)",
	"OutcomeUnknownReported": "fileguard writes local files: no request is in transit whose reply could be lost " +
		"(as in fileguard's own conformance test, it has no guardtest.OutcomeWriter)",
	"DelayedDuplicateNotApplied": "fileguard writes local files: nothing carries a copy of a write that could arrive late " +
		"(no guardtest.DuplicateWriter)",
	"FenceCallbackCarriesClaim": "it calls the guard's Fence directly with hand-made claims, outside any tool call " +
		"(fileguard's own conformance test runs it)",
	"FenceOnMissingResource": "it calls the guard's Fence directly, outside any tool call " +
		"(fileguard's own conformance test runs it)",
}

// kitWriteArgs are the arguments of the kit_write and kit_write_unfenced
// tools. Resources and values are bytes (base64 in JSON), so that the
// kit's invalid names (NUL, invalid UTF-8) reach the guard unchanged.
type kitWriteArgs struct {
	Resource []byte `json:"resource"`
	Value    []byte `json:"value"`
	// Fail makes the guarded write's callback fail after staging its value.
	Fail bool `json:"fail,omitempty"`
	// Ended makes the handler end its ctx (with errLeaseEnded) before the
	// write, as the lease's end does: the client's ctx had ended.
	Ended bool `json:"ended,omitempty"`
}

type kitReadArgs struct {
	Resource []byte `json:"resource"`
}

type kitReadResult struct {
	Found bool        `json:"found"`
	Value []byte      `json:"value,omitempty"`
	Token fence.Token `json:"token,omitempty"`
}

// kitError is the structured content of a kit tool's error result other
// than a Refusal: the kind of the guard's error.
type kitError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Reused is the guard's *fence.ReusedError (Code "reused").
	Reused *fence.ReusedError `json:"reused,omitempty"`
}

var (
	errInjected    = errors.New("kit: injected write failure")
	errLeaseEnded  = errors.New("kit: the lease ended")
	errKitWireOnly = errors.New("kit: not expressible through a tool call")
)

// kitServer is one MCP server fenced by mcpfence, its tools writing through
// one fileguard directory, and one client session.
type kitServer struct {
	t      *testing.T
	pool   *pgxpool.Pool
	seq    string // the lease schema's token sequence, quoted
	m      *lease.Manager
	f      *mcpfence.Fence
	g      *fileguard.Guard
	cs     *mcp.ClientSession
	grant  sync.Mutex // held from the Authorizer's setval until the grant returned
	mu     sync.Mutex
	unlock map[string]func() // conversation -> releases grant, while its acquisition runs
	acq    atomic.Int64      // acquisitions (one per conversation)
	nextID atomic.Int64
}

// wantToken is the token a kit conversation asks for: "<subject>.t<T>".
func wantToken(conv string) (fence.Token, error) {
	i := strings.LastIndex(conv, ".t")
	if i < 0 {
		return 0, fmt.Errorf("conversation %q names no token", conv)
	}
	n, err := strconv.ParseInt(conv[i+2:], 10, 64)
	return fence.Token(n), err
}

func newKitServer(t *testing.T) *kitServer {
	t.Helper()
	fencetest.SkipShort(t)
	k := &kitServer{t: t, unlock: map[string]func(){}}
	schema := fencetest.Schema(t, migrations.Lease)
	k.pool = fencetest.Pool(t)
	k.seq = pgx.Identifier{schema, "fencekit_token_seq"}.Sanitize()
	var err error
	k.m, err = lease.New(lease.Config{Pool: k.pool, Schema: schema,
		Authorizer: lease.AuthorizerFunc(k.authorize)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.m.Close() }) //nolint:errcheck // test teardown
	k.f, err = mcpfence.New(mcpfence.Config{Manager: k.m, Account: mcpfence.Fixed("kit"),
		Tools: map[string]mcpfence.Policy{"kit_begin": mcpfence.Acquire, "kit_write": mcpfence.Acquire,
			"kit_write_unfenced": mcpfence.Unfenced, "kit_read": mcpfence.Unfenced},
		RunIdle: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := k.f.Close(); err != nil {
			t.Error(err)
		}
	})
	if k.g, err = fileguard.New(fileguard.Config{Dir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "kit", Version: "v0"}, nil)
	// The outer middleware ends a refused acquisition's hold on grant (a
	// granted one ends it when its handler starts).
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			res, err := next(ctx, method, req)
			if ctr, ok := req.(*mcp.CallToolRequest); ok && ctr.Params != nil {
				conv, _ := ctr.Params.Meta[mcpfence.MetaConversation].(string)
				k.granted(conv)
			}
			return res, err
		}
	}, k.f.Middleware)
	obj := &jsonschema.Schema{Type: "object"}
	s.AddTool(&mcp.Tool{Name: "kit_begin", InputSchema: obj}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "run started"}}}, nil
	})
	s.AddTool(&mcp.Tool{Name: "kit_write", InputSchema: obj}, k.write)
	s.AddTool(&mcp.Tool{Name: "kit_write_unfenced", InputSchema: obj}, k.write)
	s.AddTool(&mcp.Tool{Name: "kit_read", InputSchema: obj}, k.read)

	ct, st := mcp.NewInMemoryTransports()
	ss, err := s.Connect(t.Context(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	if k.cs, err = mcp.NewClient(&mcp.Implementation{Name: "kit-client", Version: "v0"}, nil).Connect(t.Context(), ct, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		k.cs.Close() //nolint:errcheck // test teardown
		ss.Wait()    //nolint:errcheck // test teardown
	})
	return k
}

// authorize runs right before each acquire statement of a kit
// conversation: it takes grant and sets the sequence so that the statement
// draws the conversation's token.
func (k *kitServer) authorize(ctx context.Context, key lease.Key) error {
	tok, err := wantToken(key.SessionID)
	if err != nil {
		return err
	}
	k.mu.Lock()
	_, holding := k.unlock[key.SessionID] // a retried attempt of the same acquisition
	k.mu.Unlock()
	if !holding {
		k.grant.Lock()
		k.mu.Lock()
		k.unlock[key.SessionID] = sync.OnceFunc(k.grant.Unlock)
		k.mu.Unlock()
		k.acq.Add(1)
	}
	if _, err := k.pool.Exec(ctx, "SELECT setval($1::regclass, $2::bigint, false)", k.seq, int64(tok)); err != nil {
		k.granted(key.SessionID)
		return err
	}
	return nil
}

// granted ends conv's hold on grant, if it has one.
func (k *kitServer) granted(conv string) {
	k.mu.Lock()
	u := k.unlock[conv]
	delete(k.unlock, conv)
	k.mu.Unlock()
	if u != nil {
		u()
	}
}

// write is the handler of kit_write (fenced: its ctx carries the lease's
// claim) and kit_write_unfenced (no claim): one guarded write through
// fileguard's ctx-first form.
func (k *kitServer) write(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var a kitWriteArgs
	if err := json.Unmarshal(req.Params.Arguments, &a); err != nil {
		return nil, err
	}
	if req.Params.Name == "kit_write" {
		conv, _ := req.Params.Meta[mcpfence.MetaConversation].(string)
		k.granted(conv)
		want, err := wantToken(conv)
		if err != nil {
			return nil, err
		}
		c, err := fence.ClaimFromContext(ctx)
		switch {
		case err != nil:
			return nil, fmt.Errorf("a fenced tool's ctx carries no claim: %w", err)
		case c.Token != want:
			return nil, fmt.Errorf("the lease granted token %d, the kit asked for %d", c.Token, want)
		case c.Run == "" || c.Scope != (lease.Key{AccountID: "kit", SessionID: conv}).Scope():
			return nil, fmt.Errorf("the claim %+v is not the lease's", c)
		}
	}
	if a.Ended {
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		cancel(errLeaseEnded)
	}
	r := string(a.Resource)
	var err error
	if a.Fail {
		err = k.g.Do(ctx, r, func(ctx context.Context) error {
			if err := fence.Stage(ctx, a.Value); err != nil {
				return err
			}
			return errInjected
		})
	} else {
		err = k.g.Put(ctx, r, a.Value)
	}
	if err == nil {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
	}
	code, re := "other", (*fence.ReusedError)(nil)
	switch {
	case errors.Is(err, fence.ErrStale):
		code = "stale" // mcpfence replaces the result with its Refusal
	case errors.Is(err, fence.ErrBusy):
		code = "busy"
	case errors.Is(err, fence.ErrTokenReused):
		code, re = "reused", func() *fence.ReusedError { e, _ := fence.IsReused(err); return e }()
	case a.Ended && errors.Is(err, context.Canceled) && errors.Is(err, errLeaseEnded) && !errors.Is(err, fence.ErrOutcomeUnknown):
		code = "ended"
	case errors.Is(err, fence.ErrInvalidResource):
		code = "invalid_resource"
	case errors.Is(err, fence.ErrNoToken):
		code = "no_token"
	case errors.Is(err, errInjected):
		code = "injected"
	}
	res := &mcp.CallToolResult{StructuredContent: kitError{Code: code, Message: err.Error(), Reused: re}}
	res.SetError(err)
	return res, nil
}

// read is the handler of kit_read (unfenced).
func (k *kitServer) read(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var a kitReadArgs
	if err := json.Unmarshal(req.Params.Arguments, &a); err != nil {
		return nil, err
	}
	b, info, err := k.g.Get(ctx, string(a.Resource))
	if errors.Is(err, fence.ErrNotFound) {
		return &mcp.CallToolResult{StructuredContent: kitReadResult{}}, nil
	}
	if err != nil {
		return nil, err
	}
	return &mcp.CallToolResult{StructuredContent: kitReadResult{Found: true, Value: b, Token: info.Token}}, nil
}

// kitSubject drives one kit check through kitServer's tools.
type kitSubject struct {
	k  *kitServer
	id string

	mu   sync.Mutex
	runs map[string]string // conversation -> its run's handle
}

// run returns the handle of conv's run, starting the run first.
func (s *kitSubject) run(ctx context.Context, conv string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok := s.runs[conv]; ok {
		return h, nil
	}
	res, err := s.k.cs.CallTool(context.WithoutCancel(ctx), &mcp.CallToolParams{Name: "kit_begin", Arguments: map[string]any{},
		Meta: mcp.Meta{mcpfence.MetaConversation: conv, mcpfence.MetaRunStart: true}})
	if err == nil && res.IsError {
		err = fmt.Errorf("kit_begin: %v", res.Content)
	}
	if err != nil {
		return "", err
	}
	info, _ := res.Meta[mcpfence.MetaLease].(map[string]any)
	h, _ := info["run"].(string)
	if h == "" {
		return "", fmt.Errorf("kit_begin: no run handle in %v", res.Meta)
	}
	if s.runs == nil {
		s.runs = map[string]string{}
	}
	s.runs[conv] = h
	return h, nil
}

var (
	_ guardtest.ContextWriter = (*kitSubject)(nil)
	_ guardtest.FailingWriter = (*kitSubject)(nil)
)

func (k *kitServer) subject() *kitSubject {
	return &kitSubject{k: k, id: fmt.Sprintf("s%d", k.nextID.Add(1))}
}

// call makes one tools/call and turns its outcome into the guard's error.
// Under an ended ctx the call is sent anyway (nothing of the kit's ctx
// crosses the wire) with Ended set, so that the handler writes under an
// ended ctx of its own; the outcome is then reported under ctx's cause.
func (s *kitSubject) call(ctx context.Context, tool string, tok fence.Token, a kitWriteArgs) error {
	params := &mcp.CallToolParams{Name: tool, Arguments: a}
	if tool == "kit_write" {
		conv := fmt.Sprintf("%s.t%d", s.id, tok)
		h, err := s.run(ctx, conv)
		if err != nil {
			return err
		}
		params.Meta = mcp.Meta{mcpfence.MetaConversation: conv, mcpfence.MetaRun: h}
	}
	cctx := ctx
	if ctx.Err() != nil {
		params.Arguments, cctx = kitWriteArgs{Resource: a.Resource, Value: a.Value, Fail: a.Fail, Ended: true}, context.WithoutCancel(ctx)
	}
	res, err := s.k.cs.CallTool(cctx, params)
	if err == nil {
		err = resultError(res)
	}
	if ctx.Err() != nil {
		return fence.WrapContext(ctx, err)
	}
	return err
}

// resultError decodes a kit tool's result: nil for success, the guard's
// error kind for an error result.
func resultError(res *mcp.CallToolResult) error {
	if !res.IsError {
		return nil
	}
	if r, ok := mcpfence.RefusalFrom(res); ok {
		if r.Cause == mcpfence.CauseStale {
			return fmt.Errorf("tool call refused: %w", &fence.StaleError{Resource: r.Resource, Presented: r.Presented, Highest: r.Highest, Overtaken: r.Overtaken})
		}
		return fmt.Errorf("tool call refused: %s: %s", r.Cause, r.Message)
	}
	var ke kitError
	if b, err := json.Marshal(res.StructuredContent); err != nil || json.Unmarshal(b, &ke) != nil || ke.Code == "" {
		return fmt.Errorf("tool error without a kind: %v", res.Content)
	}
	var sentinel error
	switch ke.Code {
	case "busy":
		sentinel = fence.ErrBusy
	case "reused":
		if ke.Reused == nil {
			return fmt.Errorf("tool error %q: reused without its fields", ke.Message)
		}
		return fmt.Errorf("tool error: %w", ke.Reused)
	case "ended":
		// The guard's error matched context.Canceled and the handler's
		// cause; the caller adds its own ctx's (fence.WrapContext).
		return fmt.Errorf("the tool's write was refused under its ended ctx: %w", context.Canceled)
	case "invalid_resource":
		sentinel = fence.ErrInvalidResource
	case "no_token":
		sentinel = fence.ErrNoToken
	case "injected":
		sentinel = guardtest.ErrInjected
	default:
		return fmt.Errorf("tool error: %s", ke.Message)
	}
	return fmt.Errorf("tool error %q: %w", ke.Message, sentinel)
}

func (s *kitSubject) Write(ctx context.Context, r string, tok fence.Token, v string) error {
	if tok <= 0 {
		return fmt.Errorf("%w: token %d", errKitWireOnly, tok)
	}
	return s.call(ctx, "kit_write", tok, kitWriteArgs{Resource: []byte(r), Value: []byte(v)})
}

// WriteContext writes under the claim ctx carries: the kit's token becomes
// the lease's; without a claim the unfenced tool writes, whose handler's
// ctx carries none.
func (s *kitSubject) WriteContext(ctx context.Context, r, v string) error {
	c, err := fence.ClaimFromContext(ctx)
	if err != nil {
		return s.call(ctx, "kit_write_unfenced", 0, kitWriteArgs{Resource: []byte(r), Value: []byte(v)})
	}
	if c.Run != "" || c.Scope != "" {
		return fmt.Errorf("%w: claim %+v", errKitWireOnly, c)
	}
	return s.Write(ctx, r, c.Token, v)
}

func (s *kitSubject) WriteFailing(ctx context.Context, r string, tok fence.Token) error {
	return s.call(ctx, "kit_write", tok, kitWriteArgs{Resource: []byte(r), Value: []byte("never"), Fail: true})
}

func (s *kitSubject) Read(ctx context.Context, r string) (string, fence.Token, bool, error) {
	res, err := s.k.cs.CallTool(ctx, &mcp.CallToolParams{Name: "kit_read", Arguments: kitReadArgs{Resource: []byte(r)}})
	if err != nil {
		return "", 0, false, err
	}
	if res.IsError {
		return "", 0, false, fmt.Errorf("kit_read: %v", res.Content)
	}
	var out kitReadResult
	b, err := json.Marshal(res.StructuredContent)
	if err == nil {
		err = json.Unmarshal(b, &out)
	}
	return string(out.Value), out.Token, out.Found, err
}

// TestKitThroughToolCalls runs every conformance check that applies with
// the guard inside MCP tool handlers (see the top of this file).
func TestKitThroughToolCalls(t *testing.T) {
	k := newKitServer(t)
	cfg, err := guardtest.Config{Logf: t.Logf}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range guardtest.Checks() {
		names = append(names, c.Name)
		if why, ok := kitNotApplicable[c.Name]; ok {
			t.Logf("%s: not applicable: %s", c.Name, why)
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), cfg.Timeout)
			defer cancel()
			before := k.acq.Load()
			if err := c.Func(ctx, k.subject(), cfg); err != nil {
				t.Fatal(err)
			}
			if k.acq.Load() == before {
				t.Fatal("the check obtained no lease: its writes did not go through fenced tool calls")
			}
		})
	}
	for name := range kitNotApplicable {
		if !slices.Contains(names, name) {
			t.Errorf("kitNotApplicable names %q, which is no longer a kit check", name)
		}
	}
}

// TestKitTokenReuseAcrossLeases is the run-identity rule through tool
// calls: two leases granted the same token (the sequence set back, as after
// a restore that the token floor did not catch) are two runs; the guard
// admits the first run's write and refuses the second's with a
// *fence.ReusedError naming both lease run ids; a higher token from the
// second run is then admitted and the first is refused as stale.
func TestKitTokenReuseAcrossLeases(t *testing.T) {
	k := newKitServer(t)
	ctx := t.Context()
	a, b := k.subject(), k.subject()
	r := fencetest.RandomName("reuse") + "/notes"
	if err := a.Write(ctx, r, 7, "a"); err != nil {
		t.Fatal(err)
	}
	re, ok := fence.IsReused(b.Write(ctx, r, 7, "b"))
	if !ok {
		t.Fatal("a second lease's write under the same token was not refused as a reused token")
	}
	runA, runB := k.leaseRun(t, a, 7), k.leaseRun(t, b, 7)
	if *re != (fence.ReusedError{Resource: r, Token: 7, Run: runB, MarkRun: runA}) || runA == runB {
		t.Fatalf("reuse refusal %+v, want run %s refused over the mark of run %s", *re, runB, runA)
	}
	if v, tok, _, err := a.Read(ctx, r); err != nil || v != "a" || tok != 7 {
		t.Fatalf("after the reused token: %q %d %v, want \"a\" 7", v, tok, err)
	}
	if err := b.Write(ctx, r, 8, "b8"); err != nil {
		t.Fatal(err)
	}
	if _, ok := fence.IsStale(a.Write(ctx, r, 7, "late")); !ok {
		t.Fatal("the first lease's write after a higher token was not refused as stale")
	}
	if v, tok, _, err := a.Read(ctx, r); err != nil || v != "b8" || tok != 8 {
		t.Fatalf("final state %q %d %v, want \"b8\" 8", v, tok, err)
	}
}

// leaseRun is the run id of the lease of s's conversation of token tok.
func (k *kitServer) leaseRun(t *testing.T, s *kitSubject, tok fence.Token) string {
	t.Helper()
	o, err := k.m.Inspect(t.Context(), lease.Key{AccountID: "kit", SessionID: fmt.Sprintf("%s.t%d", s.id, tok)})
	if err != nil || o.Token != tok || !o.Held() {
		t.Fatalf("the lease of %s's token %d: %+v, %v", s.id, tok, o, err)
	}
	return o.RunID.String()
}
