package mcpfence_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/mcpfence"
	"github.com/fencekit/fencekit/sql/migrations"
)

// BenchmarkCall is one tool call over the SDK's in-memory transports
// (no HTTP), for the allocations and CPU of the fenced path: "unfenced" is
// the tool passed through, "floor" the same tool committing one UPSERT of
// its own (the floor of make bench-mcp), "fenced" the tool fenced per call
// (acquire, the handler's claim, the result's lease _meta, release after
// the result). The calls are sequential and cycle over four conversations
// per case, so that a fenced call's release, sent after its result, is not
// waited for by the next call (a call of the same conversation on the
// same Fence waits for it), but still runs beside it. Timings on a
// shared machine belong to make bench-mcp, which runs the sides
// interleaved; this benchmark is for allocs/op and profiles.
func BenchmarkCall(b *testing.B) {
	ctx := context.Background()
	pool := fencetest.Pool(b)
	schema := fencetest.Schema(b, migrations.Lease)
	m, err := lease.New(lease.Config{Pool: pool, Schema: schema})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close() //nolint:errcheck // bench teardown
	f, err := mcpfence.New(mcpfence.Config{Manager: m, Account: mcpfence.Fixed("bench"),
		Tools: map[string]mcpfence.Policy{"unfenced": mcpfence.Unfenced, "floor": mcpfence.Unfenced, "fenced": mcpfence.Acquire}})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close() //nolint:errcheck // bench teardown
	table := pgx.Identifier{schema, "bench_floor"}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+table+" (conversation text PRIMARY KEY, n bigint NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	upsert := "INSERT INTO " + table + " AS f (conversation, n) VALUES ($1, 1) ON CONFLICT (conversation) DO UPDATE SET n = f.n + 1"
	s := mcp.NewServer(&mcp.Implementation{Name: "bench", Version: "v0"}, nil)
	s.AddReceivingMiddleware(f.Middleware)
	type in struct {
		Text string `json:"text"`
	}
	type out struct {
		OK bool `json:"ok"`
	}
	tool := func(floor bool) mcp.ToolHandlerFor[in, out] {
		return func(ctx context.Context, req *mcp.CallToolRequest, _ in) (*mcp.CallToolResult, out, error) {
			if floor {
				conv, _ := req.Params.Meta[mcpfence.MetaConversation].(string)
				if _, err := pool.Exec(ctx, upsert, conv); err != nil {
					return nil, out{}, err
				}
			}
			return nil, out{OK: true}, nil
		}
	}
	mcp.AddTool(s, &mcp.Tool{Name: "unfenced"}, tool(false))
	mcp.AddTool(s, &mcp.Tool{Name: "floor"}, tool(true))
	mcp.AddTool(s, &mcp.Tool{Name: "fenced"}, tool(false))
	ct, st := mcp.NewInMemoryTransports()
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer ss.Wait() //nolint:errcheck // bench teardown
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "v0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close() //nolint:errcheck // bench teardown
	for _, name := range []string{"unfenced", "floor", "fenced"} {
		b.Run(name, func(b *testing.B) {
			var ps [4]*mcp.CallToolParams
			for i := range ps {
				ps[i] = &mcp.CallToolParams{Name: name, Meta: mcp.Meta{mcpfence.MetaConversation: fmt.Sprintf("c%d-%s", i, name)}, Arguments: map[string]any{"text": "x"}}
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				res, err := cs.CallTool(ctx, ps[i%len(ps)])
				i++
				if err != nil {
					b.Fatal(err)
				}
				if res.IsError {
					b.Fatalf("%s: error result: %v", name, res.GetError())
				}
			}
		})
	}
}
