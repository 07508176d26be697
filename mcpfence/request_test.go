package mcpfence_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/mcpfence"
	"github.com/fencekit/fencekit/sql/migrations"
)

// Duplicate calls: two replicas (pools, lease Managers, Fences and MCP
// servers of their own) share one schema with the lease and mcp migration
// sets and a guarded store, the table puts, whose rows the tool "put"
// inserts in a transaction that checks the call's lease row.

// requestEnv is the shared database of a request test's replicas.
type requestEnv struct {
	t      *testing.T
	schema string
	raw    *pgxpool.Pool // the test's own connections
	ran    atomic.Int64  // calls that entered put's handler, on every replica
	// started receives a value when a put with block set starts; release
	// lets blocked puts go on (as does the end of the test).
	started chan string
	release chan struct{}
}

func newRequestEnv(t *testing.T) *requestEnv {
	t.Helper()
	fencetest.SkipShort(t)
	e := &requestEnv{t: t, schema: fencetest.Schema(t, migrations.Lease, migrations.MCP), raw: fencetest.Pool(t),
		started: make(chan string, 4), release: make(chan struct{})}
	if _, err := e.raw.Exec(t.Context(), `CREATE TABLE "`+e.schema+`".puts (conv text NOT NULL, value text NOT NULL, token bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return e
}

type putArgs struct {
	Value string `json:"value"`
	Block bool   `json:"block,omitempty"` // wait for release, ignoring ctx
}

// replica starts a server on e's schema with tools put (Acquire) and
// put_take (ContinueHere), and the harness's own tools.
func (e *requestEnv) replica(cfg mcpfence.Config) *harness {
	e.t.Helper()
	pool := fencetest.Pool(e.t)
	if cfg.Requests == nil {
		cfg.Requests = pool
	}
	cfg.RequestSchema = e.schema
	cfg.Tools = map[string]mcpfence.Policy{"put": mcpfence.Acquire, "put_take": mcpfence.ContinueHere, "write": mcpfence.Acquire}
	h := newReplica(e.t, cfg, lease.Config{}, e.schema)
	put := func(ctx context.Context, req *mcp.CallToolRequest, a putArgs) (*mcp.CallToolResult, map[string]any, error) {
		e.ran.Add(1)
		claim, err := fence.ClaimFromContext(ctx)
		if err != nil {
			return nil, nil, err
		}
		if a.Block {
			e.started <- a.Value
			select {
			case <-e.release:
			case <-e.t.Context().Done(): // the test failed early: let the server stop
			}
		}
		conv, _ := req.Params.Meta[mcpfence.MetaConversation].(string)
		wctx := context.WithoutCancel(ctx)
		tx, err := pool.Begin(wctx)
		if err != nil {
			return nil, nil, err
		}
		defer tx.Rollback(wctx) //nolint:errcheck // after Commit, a no-op
		if err := lease.CheckClaimTx(wctx, tx, e.schema, lease.Key{AccountID: "acme", SessionID: conv}, claim); err != nil {
			return nil, nil, err
		}
		if _, err := tx.Exec(wctx, `INSERT INTO "`+e.schema+`".puts (conv, value, token) VALUES ($1, $2, $3)`, conv, a.Value, int64(claim.Token)); err != nil {
			return nil, nil, err
		}
		if err := tx.Commit(wctx); err != nil {
			return nil, nil, err
		}
		return nil, map[string]any{"value": a.Value, "token": claim.Token.String()}, nil
	}
	mcp.AddTool(h.server, &mcp.Tool{Name: "put"}, put)
	mcp.AddTool(h.server, &mcp.Tool{Name: "put_take"}, put)
	return h
}

// puts counts the rows of the guarded store.
func (e *requestEnv) puts() int {
	e.t.Helper()
	var n int
	if err := e.raw.QueryRow(e.t.Context(), `SELECT count(*) FROM "`+e.schema+`".puts`).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// putCall calls tool in conv with request id rq.
func putCall(ctx context.Context, cs *mcp.ClientSession, tool, conv string, rq any, a putArgs) (*mcp.CallToolResult, error) {
	return callMeta(ctx, cs, tool, conv, mcp.Meta{mcpfence.MetaRequest: rq}, map[string]any{"value": a.Value, "block": a.Block})
}

// wire returns the JSON of a client-side result.
func wire(t *testing.T) func(res *mcp.CallToolResult, err error) []byte {
	return func(res *mcp.CallToolResult, err error) []byte {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

// TestRequestDuplicateOnOtherReplica: the same request id on the other
// replica, and on a replica started afterwards, returns the first result
// byte for byte and writes nothing; the same id in another conversation is
// another request.
func TestRequestDuplicateOnOtherReplica(t *testing.T) {
	e := newRequestEnv(t)
	a, b := e.replica(mcpfence.Config{}), e.replica(mcpfence.Config{})
	ca, cb := a.client("desktop"), b.client("phone")
	first := wire(t)(putCall(t.Context(), ca, "put", "c1", "req-1", putArgs{Value: "x"}))
	if c := cause(putCall(t.Context(), ca, "put", "c1", "req-1", putArgs{Value: "x"})); c != "ok" {
		t.Fatalf("the duplicate on the same replica: %s", c)
	}
	if again := wire(t)(putCall(t.Context(), cb, "put", "c1", "req-1", putArgs{Value: "x"})); !bytes.Equal(again, first) {
		t.Errorf("the duplicate on the other replica:\n got %s\nwant %s", again, first)
	}
	restarted := e.replica(mcpfence.Config{})
	if again := wire(t)(putCall(t.Context(), restarted.client("laptop"), "put", "c1", "req-1", putArgs{Value: "x"})); !bytes.Equal(again, first) {
		t.Errorf("the duplicate on a replica started afterwards:\n got %s\nwant %s", again, first)
	}
	if n, ran := e.puts(), e.ran.Load(); n != 1 || ran != 1 {
		t.Fatalf("after four calls of one request: %d rows written, the tool ran %d times; want 1 and 1", n, ran)
	}
	if c := cause(putCall(t.Context(), cb, "put", "c2", "req-1", putArgs{Value: "x"})); c != "ok" {
		t.Fatalf("the same id in another conversation: %s", c)
	}
	if n := e.puts(); n != 2 {
		t.Errorf("the same id in another conversation wrote %d rows in all, want 2", n)
	}
	if !strings.Contains(string(first), `"value":"x"`) {
		t.Errorf("the first result does not carry the tool's output: %s", first)
	}
}

// TestRequestDuplicateWaitsForFirst: a duplicate that arrives on the other
// replica while the first call runs waits for it and gets its result.
func TestRequestDuplicateWaitsForFirst(t *testing.T) {
	e := newRequestEnv(t)
	a, b := e.replica(mcpfence.Config{}), e.replica(mcpfence.Config{MaxWait: time.Minute})
	ca, cb := a.client("desktop"), b.client("phone")
	type out struct {
		b   []byte
		res *mcp.CallToolResult
		err error
	}
	firstDone, dupDone := make(chan out, 1), make(chan out, 1)
	go func() {
		res, err := putCall(t.Context(), ca, "put", "c1", "req-1", putArgs{Value: "x", Block: true})
		b, _ := json.Marshal(res)
		firstDone <- out{b, res, err}
	}()
	select {
	case <-e.started:
	case o := <-firstDone:
		t.Fatalf("the first call returned before its tool started: %s, %v", o.b, o.err)
	}
	go func() {
		res, err := putCall(t.Context(), cb, "put", "c1", "req-1", putArgs{Value: "x", Block: true})
		b, _ := json.Marshal(res)
		dupDone <- out{b, res, err}
	}()
	// The duplicate must not answer while the first call runs.
	select {
	case o := <-dupDone:
		t.Fatalf("the duplicate returned while the first call ran: %s, %v", o.b, o.err)
	case <-time.After(300 * time.Millisecond):
	}
	close(e.release)
	f, d := <-firstDone, <-dupDone
	if f.err != nil || d.err != nil || cause(f.res, f.err) != "ok" {
		t.Fatalf("first: %s, %v; duplicate: %s, %v", f.b, f.err, d.b, d.err)
	}
	if !bytes.Equal(f.b, d.b) {
		t.Errorf("the duplicate's result:\n got %s\nwant %s", d.b, f.b)
	}
	if n, ran := e.puts(), e.ran.Load(); n != 1 || ran != 1 {
		t.Errorf("%d rows written, the tool ran %d times; want 1 and 1", n, ran)
	}
}

// TestRequestConflict: the same request id with other arguments or another
// tool is refused and runs nothing.
func TestRequestConflict(t *testing.T) {
	e := newRequestEnv(t)
	a, b := e.replica(mcpfence.Config{}), e.replica(mcpfence.Config{})
	ca, cb := a.client("desktop"), b.client("phone")
	if c := cause(putCall(t.Context(), ca, "put", "c1", "req-1", putArgs{Value: "x"})); c != "ok" {
		t.Fatalf("the first call: %s", c)
	}
	for what, c := range map[string]string{
		"other arguments": cause(putCall(t.Context(), cb, "put", "c1", "req-1", putArgs{Value: "y"})),
		"another tool":    cause(putCall(t.Context(), cb, "put_take", "c1", "req-1", putArgs{Value: "x"})),
	} {
		if c != mcpfence.CauseRequestConflict {
			t.Errorf("the same request id with %s: %s, want %s", what, c, mcpfence.CauseRequestConflict)
		}
	}
	if n, ran := e.puts(), e.ran.Load(); n != 1 || ran != 1 {
		t.Errorf("%d rows written, the tool ran %d times; want 1 and 1", n, ran)
	}
}

// TestRequestIDChecked: a malformed request id is refused before any lease
// statement, as is a request id on a Fence that keeps no results.
func TestRequestIDChecked(t *testing.T) {
	e := newRequestEnv(t)
	a := e.replica(mcpfence.Config{})
	ca := a.client("desktop")
	for name, id := range map[string]any{
		"empty":     "",
		"too long":  strings.Repeat("r", mcpfence.MaxRequestIDLen+1),
		"NUL":       "a\x00b",
		"U+FFFD":    "a\ufffdb",
		"a number":  42,
		"an object": map[string]any{"id": "r"},
	} {
		if c := cause(putCall(t.Context(), ca, "put", "c1", id, putArgs{Value: "x"})); c != mcpfence.CauseInvalidMeta {
			t.Errorf("request id %s: %s, want %s", name, c, mcpfence.CauseInvalidMeta)
		}
	}
	if c := cause(putCall(t.Context(), ca, "put", "c1", strings.Repeat("r", mcpfence.MaxRequestIDLen), putArgs{Value: "x"})); c != "ok" {
		t.Errorf("a request id of MaxRequestIDLen bytes: %s", c)
	}
	plain := newReplica(t, mcpfence.Config{Tools: map[string]mcpfence.Policy{"write": mcpfence.Acquire}}, lease.Config{}, e.schema)
	if c := cause(callMeta(t.Context(), plain.client("desktop"), "write", "c2", mcp.Meta{mcpfence.MetaRequest: "req-1"}, nil)); c != mcpfence.CauseInvalidMeta {
		t.Errorf("a request id on a Fence without Requests: %s, want %s", c, mcpfence.CauseInvalidMeta)
	}
	if o, err := a.m.Inspect(t.Context(), lease.Key{AccountID: "acme", SessionID: "c2"}); err != nil || o.Token != 0 {
		t.Errorf("the refused call left a lease row: %+v, %v", o, err)
	}
	if n, ran := e.puts(), e.ran.Load(); n != 1 || ran != 1 {
		t.Errorf("%d rows written, the tool ran %d times; want 1 and 1 (the valid id)", n, ran)
	}
}

// TestRequestOwnerDisplaced: while the first call of a request runs (its
// handler ignoring its ctx), another device takes the conversation over;
// a duplicate is then refused as unknown and runs nothing. When the
// displaced call returns (its write refused), later duplicates get its
// result.
func TestRequestOwnerDisplaced(t *testing.T) {
	e := newRequestEnv(t)
	a, b := e.replica(mcpfence.Config{}), e.replica(mcpfence.Config{})
	ca, cb := a.client("desktop"), b.client("phone")
	firstDone := make(chan []byte, 1)
	go func() {
		res, err := putCall(t.Context(), ca, "put", "c1", "req-1", putArgs{Value: "x", Block: true})
		if err != nil {
			t.Error(err)
		}
		b, _ := json.Marshal(res)
		firstDone <- b
	}()
	<-e.started
	if c := cause(putCall(t.Context(), cb, "put_take", "c1", "req-2", putArgs{Value: "y"})); c != "ok" {
		t.Fatalf("the takeover: %s", c)
	}
	res, err := putCall(t.Context(), cb, "put", "c1", "req-1", putArgs{Value: "x", Block: true})
	if c := cause(res, err); c != mcpfence.CauseRequestUnknown {
		t.Fatalf("a duplicate after its first call was displaced: %s, want %s", c, mcpfence.CauseRequestUnknown)
	}
	if r, _ := mcpfence.RefusalFrom(res); r.Token == 0 || r.Owner == nil || r.Owner.Token <= r.Token {
		t.Errorf("the refusal names token %d and owner %+v; want the first call's token and the newer owner", r.Token, r.Owner)
	}
	close(e.release)
	first := <-firstDone
	if !strings.Contains(string(first), `"isError":true`) {
		t.Errorf("the displaced call's result: %s, want an error result", first)
	}
	if again := wire(t)(putCall(t.Context(), cb, "put", "c1", "req-1", putArgs{Value: "x", Block: true})); !bytes.Equal(again, first) {
		t.Errorf("a duplicate after the displaced call returned:\n got %s\nwant %s", again, first)
	}
	var values []string
	rows, err := e.raw.Query(t.Context(), `SELECT value FROM "`+e.schema+`".puts`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		values = append(values, v)
	}
	if rows.Err() != nil || len(values) != 1 || values[0] != "y" || e.ran.Load() != 2 {
		t.Errorf("written %v (%v), the tool ran %d times; want only the takeover's y, and 2", values, rows.Err(), e.ran.Load())
	}
}

// TestRequestRetention: a request older than RequestRetention is deleted
// by a later claim, and a duplicate of it then runs as a new call.
func TestRequestRetention(t *testing.T) {
	e := newRequestEnv(t)
	a := e.replica(mcpfence.Config{RequestRetention: mcpfence.MinRequestRetention})
	ca := a.client("desktop")
	if c := cause(putCall(t.Context(), ca, "put", "c1", "req-1", putArgs{Value: "x"})); c != "ok" {
		t.Fatalf("the first call: %s", c)
	}
	if c := cause(putCall(t.Context(), ca, "put", "c1", "req-2", putArgs{Value: "x"})); c != "ok" {
		t.Fatalf("another request: %s", c)
	}
	if _, err := e.raw.Exec(t.Context(), `UPDATE "`+e.schema+`".fencekit_mcp_requests SET created_at = created_at - interval '61 seconds' WHERE request_id = 'req-1'`); err != nil {
		t.Fatal(err)
	}
	if c := cause(putCall(t.Context(), ca, "put", "c1", "req-3", putArgs{Value: "x"})); c != "ok" {
		t.Fatalf("a third request: %s", c)
	}
	var n int
	if err := e.raw.QueryRow(t.Context(), `SELECT count(*) FROM "`+e.schema+`".fencekit_mcp_requests`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d request rows (%v), want 2: req-1 deleted by the third claim", n, err)
	}
	if c := cause(putCall(t.Context(), ca, "put", "c1", "req-2", putArgs{Value: "x"})); c != "ok" || e.puts() != 3 {
		t.Fatalf("a duplicate within the window: %s, %d rows; want ok and 3", c, e.puts())
	}
	if c := cause(putCall(t.Context(), ca, "put", "c1", "req-1", putArgs{Value: "x"})); c != "ok" || e.puts() != 4 {
		t.Errorf("req-1 after its window: %s, %d rows; want ok and a new write (4)", c, e.puts())
	}
}

// TestRequestExecModes: the request statements work in the query modes
// poolers require (every parameter in text format): a duplicate replays,
// another argument is a conflict.
func TestRequestExecModes(t *testing.T) {
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		t.Run(mode.String(), func(t *testing.T) {
			e := newRequestEnv(t)
			a := e.replica(mcpfence.Config{Requests: fencetest.PoolInMode(t, mode)})
			b := e.replica(mcpfence.Config{Requests: fencetest.PoolInMode(t, mode)})
			ca, cb := a.client("desktop"), b.client("phone")
			first := wire(t)(putCall(t.Context(), ca, "put", "c1", "req-1", putArgs{Value: "x"}))
			if again := wire(t)(putCall(t.Context(), cb, "put", "c1", "req-1", putArgs{Value: "x"})); !bytes.Equal(again, first) {
				t.Errorf("the duplicate:\n got %s\nwant %s", again, first)
			}
			if c := cause(putCall(t.Context(), cb, "put", "c1", "req-1", putArgs{Value: "y"})); c != mcpfence.CauseRequestConflict {
				t.Errorf("other arguments: %s, want %s", c, mcpfence.CauseRequestConflict)
			}
			if n, ran := e.puts(), e.ran.Load(); n != 1 || ran != 1 || !strings.Contains(string(first), `"value":"x"`) {
				t.Errorf("%d rows written, the tool ran %d times, first result %s; want 1, 1 and the tool's output", n, ran, first)
			}
		})
	}
}
