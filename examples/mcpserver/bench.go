package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/mcpfence"
	"github.com/fencekit/fencekit/sql/migrations"
)

// runBench measures one tool call over streamable HTTP (Go SDK client and
// server on loopback), three ways, interleaved call by call so that load on
// the machine hits all alike:
//
//   - plain: the tool unfenced, its row inserted in a plain transaction;
//   - fenced: the same tool fenced per call: acquire + the insert through
//     pgguard (mark checked and raised in the same transaction) + release;
//   - run: the same fenced tool as a later call of a run (the lease was
//     obtained by the run's first call): the guarded insert only.
//
// It prints p50 and p99 of each and the ratios to plain.
func runBench(ctx context.Context, pool *pgxpool.Pool, schema string, n int, out io.Writer) error {
	if _, err := migrations.Migrate(ctx, pool, migrations.Options{Schema: schema}, migrations.Lease, migrations.Guard); err != nil {
		return err
	}
	table := pgx.Identifier{schema, "bench_notes"}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+table+" (id bigserial PRIMARY KEY, conversation text NOT NULL, body text NOT NULL)"); err != nil {
		return err
	}
	m, err := lease.New(lease.Config{Pool: pool, Schema: schema})
	if err != nil {
		return err
	}
	defer m.Close() //nolint:errcheck // bench teardown
	g, err := pgguard.New(pgguard.Config{DB: pool, Schema: schema})
	if err != nil {
		return err
	}
	f, err := mcpfence.New(mcpfence.Config{Manager: m, Account: mcpfence.Fixed("bench"),
		Tools: map[string]mcpfence.Policy{"plain_write": mcpfence.Unfenced, "fenced_write": mcpfence.Acquire}})
	if err != nil {
		return err
	}
	defer f.Close() //nolint:errcheck // bench teardown
	s := mcp.NewServer(&mcp.Implementation{Name: "bench", Version: "v0"}, nil)
	s.AddReceivingMiddleware(f.Middleware)
	type in struct {
		Text string `json:"text"`
	}
	type outT struct {
		OK bool `json:"ok"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "plain_write"}, func(ctx context.Context, req *mcp.CallToolRequest, a in) (*mcp.CallToolResult, outT, error) {
		conv, _ := req.Params.Meta[mcpfence.MetaConversation].(string)
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO "+table+" (conversation, body) VALUES ($1, $2)", conv, a.Text)
			return err
		})
		return nil, outT{OK: err == nil}, err
	})
	mcp.AddTool(s, &mcp.Tool{Name: "fenced_write"}, func(ctx context.Context, req *mcp.CallToolRequest, a in) (*mcp.CallToolResult, outT, error) {
		conv, _ := req.Params.Meta[mcpfence.MetaConversation].(string)
		key := lease.Key{AccountID: "bench", SessionID: conv}
		err := g.InTx(ctx, key.Resource("notes"), func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO "+table+" (conversation, body) VALUES ($1, $2)", conv, a.Text)
			return err
		})
		return nil, outT{OK: err == nil}, err
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)  //nolint:errcheck // ends with Close below
	defer srv.Close() //nolint:errcheck // bench teardown
	cs, err := Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + ln.Addr().String()}, "bench", nil)
	if err != nil {
		return err
	}
	defer cs.Close() //nolint:errcheck // bench teardown

	conv := "bench-" + uuid.NewString()[:8]
	runConv := conv + "-run"
	runID := uuid.NewString()
	callOne := func(tool, conv, run string) (time.Duration, error) {
		meta := mcp.Meta{mcpfence.MetaConversation: conv}
		if run != "" {
			meta[mcpfence.MetaRun] = run
		}
		start := time.Now()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Meta: meta, Arguments: map[string]any{"text": "x"}})
		d := time.Since(start)
		if err == nil && res.IsError {
			err = fmt.Errorf("%s: %s", tool, describe(res))
		}
		return d, err
	}
	// The run's first call obtains its lease; warm up all three paths.
	for range 20 {
		for _, c := range [][3]string{{"plain_write", conv, ""}, {"fenced_write", conv, ""}, {"fenced_write", runConv, runID}} {
			if _, err := callOne(c[0], c[1], c[2]); err != nil {
				return err
			}
		}
	}
	var plain, fenced, inRun []time.Duration
	for range n {
		d, err := callOne("plain_write", conv, "")
		if err != nil {
			return err
		}
		plain = append(plain, d)
		if d, err = callOne("fenced_write", conv, ""); err != nil {
			return err
		}
		fenced = append(fenced, d)
		if d, err = callOne("fenced_write", runConv, runID); err != nil {
			return err
		}
		inRun = append(inRun, d)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fenced_write", Arguments: map[string]any{"text": "end"},
		Meta: mcp.Meta{mcpfence.MetaConversation: runConv, mcpfence.MetaRun: runID, mcpfence.MetaRunEnd: true}}); err != nil {
		return err
	}
	pq := func(ds []time.Duration, q float64) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[min(len(s)-1, int(q*float64(len(s))))]
	}
	p50, p99 := pq(plain, .50), pq(plain, .99)
	fmt.Fprintf(out, "MCP tool call over streamable HTTP, %d calls each, interleaved\n", n)
	fmt.Fprintf(out, "%-40s %10s %10s %9s %9s\n", "case", "p50", "p99", "p50 ×", "p99 ×")
	for _, c := range []struct {
		name string
		ds   []time.Duration
	}{
		{"unfenced (plain tx insert)", plain},
		{"fenced per call (acquire+guard+release)", fenced},
		{"fenced, later call of a run (guard)", inRun},
	} {
		a, b := pq(c.ds, .50), pq(c.ds, .99)
		fmt.Fprintf(out, "%-40s %10s %10s %8.2fx %8.2fx\n", c.name, a.Round(time.Microsecond), b.Round(time.Microsecond),
			float64(a)/float64(p50), float64(b)/float64(p99))
	}
	return nil
}
