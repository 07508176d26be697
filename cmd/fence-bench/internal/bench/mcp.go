package bench

import "fmt"

// MCPCallKeys are the metrics of the mcp_call case, set to NaN when it
// fails before reporting them.
var MCPCallKeys = []string{"mcp_fenced_call_ratio", "mcp_fenced_vs_floor_ratio", "mcp_run_call_ratio", "mcp_run_cached_call_ratio", "mcp_release_before_reply_ratio",
	"mcp_floor_ratio", "mcp_fenced_vs_floor_after_ratio", "mcp26_fenced_call_ratio", "mcp26_fenced_vs_floor_ratio", "mcp26_fenced_vs_floor_after_ratio", "mcp26_floor_ratio", "mcp26_run_call_ratio", "mcp26_run_cached_call_ratio", "mcp_fenced_call_p99_ratio",
	"mcp_unfenced_call_p50_us", "mcp_unfenced_call_p99_us", "mcp_floor_call_p50_us", "mcp_floor_call_p99_us", "mcp_floor_after_call_p50_us", "mcp_floor_after_call_p99_us",
	"mcp_fenced_call_p50_us", "mcp_fenced_call_p99_us",
	"mcp_run_call_p50_us", "mcp_run_call_p99_us", "mcp_run_cached_call_p50_us", "mcp_run_cached_call_p99_us", "mcp_release_before_reply_call_p50_us", "mcp_release_before_reply_call_p99_us",
	"mcp26_unfenced_call_p50_us", "mcp26_unfenced_call_p99_us", "mcp26_floor_call_p50_us", "mcp26_floor_call_p99_us", "mcp26_floor_after_call_p50_us", "mcp26_floor_after_call_p99_us",
	"mcp26_fenced_call_p50_us", "mcp26_fenced_call_p99_us", "mcp26_run_call_p50_us", "mcp26_run_call_p99_us", "mcp26_run_cached_call_p50_us", "mcp26_run_cached_call_p99_us",
	"mcp_stage_transport_us", "mcp_stage_fence_us", "mcp_stage_write_us", "mcp_stage_fence_unfenced_us", "mcp_stage_write_unfenced_us",
	"mcp_stage_fence_run_us", "mcp_stage_fence_run_cached_us", "mcp_stage_fence_before_reply_us"}

// MCPCallCase is a tool call of an MCP server fenced by mcpfence against
// the same tool unfenced, measured by the MCP bench module (e.MCPDir, a
// separate module so that the main module does not depend on the MCP SDK)
// run as `go run . -db <url>`.
func MCPCallCase() Case {
	const name = "mcp_call"
	return Case{Name: name, Keys: MCPCallKeys, Run: func(e *Env) error {
		if e.MCPDir == "" {
			e.nullMissing(MCPCallKeys, "failed: "+name)
			return fmt.Errorf("no MCP bench directory (-mcp)")
		}
		return runModule(e, name, e.MCPDir, MCPCallKeys, "-db", e.DBURL)
	}}
}
