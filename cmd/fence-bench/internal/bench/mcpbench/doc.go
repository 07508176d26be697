// Command mcpbench measures one MCP tool call over streamable HTTP (the Go
// SDK's client and server on loopback, one client session per server)
// fenced by mcpfence against the same tool unfenced, side by side in one
// run, and prints the metrics as lines of JSON (bench.WriteMetricLines) and
// a table on stderr.
//
// Every side calls the same tool handler, which does the same guarded
// write: pgguard's InTx (the mark checked and raised in the transaction)
// around one INSERT. The sides differ only in the lease:
//
//   - unfenced: the tool's policy is mcpfence.Unfenced; the handler finds no
//     claim in its ctx and writes under a fixed claim of its own (the same
//     statements, no lease);
//   - floor: the unfenced tool doing one more durable commit of its own
//     first (an UPSERT of one row, the shape of a grant);
//   - floor, +1 commit after: the floor, and one more durable commit of
//     the tool's own (an UPDATE of that row, the shape of a release) sent
//     in the background as the handler returns, the result not waiting
//     for it, and waited for by the conversation's next call: the two
//     commits a per-call lease costs, without fencekit;
//   - fenced: policy Acquire, a lease per call (acquire, the handler's
//     write under the lease's claim, release after the result);
//   - run: the same fenced tool as a later call of a run (io.fencekit/run,
//     the handle the run's first call, io.fencekit/run_start, returned):
//     the run's parked grant resumed, the write, the grant parked again
//     before the result (a run lives in the database between its calls);
//   - run, RunCache: a later call of a run on a third server whose Fence
//     has Config.RunCache and which parked the run's previous call: no
//     lease statement on the call's path (the run's parked expiry is
//     extended in the background);
//   - fenced, release before reply: a second server whose Fence has
//     Config.ReleaseBeforeReply (the result waits for the release).
//
// The unfenced, both floor, fenced, run and run-with-RunCache sides run on both
// protocol revisions: 2025-11-25 (the client pinned to it, one MCP
// session) and 2026-07-28 (stateless requests).
//
// Rounds run one call of each side, in an order shuffled every round
// (bench.Shuffled, seeded by the round), so that the machine's load hits
// every side alike and no side always follows the same other side (a
// fenced call leaves its release behind it, a cached run its extension). The
// ratios are of p50s, per block of consecutive rounds (the median over
// bench.RatioBlocks blocks, with min and max); the stages (transport, the
// Fence, the guarded write) are timed by the server for every call. It is
// a module of its own so that the main module does not depend on the MCP
// SDK; cmd/fence-bench runs it with `go run . -db <url>` (make bench, case
// mcp_call).
//
// Usage:
//
//	eval "$(scripts/services.sh)"; cd cmd/fence-bench/internal/bench/mcpbench && go run . [-quick] [-rounds N]
package main
