package main

import (
	"context"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fencekit/fencekit/mcpfence"
)

// Device is one MCP client of a conversation: a desktop app, a browser tab.
type Device struct {
	Name    string
	Session *mcp.ClientSession
	Account string
	Conv    string
}

// bearer adds the user's bearer token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// ConnectHTTP connects a Go SDK client named name, signed in as user, to the
// streamable-HTTP endpoint, on the 2025-11-25 revision (an MCP session: the
// client's runs stay on the replica that started them). onProgress, when
// not nil, receives the server's progress notifications.
func ConnectHTTP(ctx context.Context, endpoint, name, user string, onProgress func(*mcp.ProgressNotificationParams)) (*mcp.ClientSession, error) {
	t := &mcp.StreamableClientTransport{Endpoint: endpoint,
		HTTPClient: &http.Client{Transport: bearer{token: user, next: http.DefaultTransport}}}
	return connect(ctx, t, name, onProgress, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
}

// Connect connects a Go SDK client named name over t.
func Connect(ctx context.Context, t mcp.Transport, name string, onProgress func(*mcp.ProgressNotificationParams)) (*mcp.ClientSession, error) {
	return connect(ctx, t, name, onProgress, nil)
}

func connect(ctx context.Context, t mcp.Transport, name string, onProgress func(*mcp.ProgressNotificationParams), sopts *mcp.ClientSessionOptions) (*mcp.ClientSession, error) {
	opts := &mcp.ClientOptions{}
	if onProgress != nil {
		opts.ProgressNotificationHandler = func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			onProgress(req.Params)
		}
	}
	c := mcp.NewClient(&mcp.Implementation{Name: name, Version: "v0.1.0"}, opts)
	return c.Connect(ctx, t, sopts)
}

// StartRun, passed as Call's run, starts a run with the call: its result
// names the run's handle (RunHandle), which the run's later calls pass as
// run, on any replica of the server.
const StartRun = "start"

// Call calls tool with args in the device's conversation; run, when not
// empty, makes the call part of a run: StartRun starts one, a handle
// (RunHandle of the run's first result) continues it (end: its last
// call); progress, when not nil, asks for progress notifications with that
// token.
func (d *Device) Call(ctx context.Context, tool string, args map[string]any, run string, end bool, progress any) (*mcp.CallToolResult, error) {
	meta := mcp.Meta{mcpfence.MetaAccount: d.Account, mcpfence.MetaConversation: d.Conv}
	RunMeta(meta, run, end)
	p := &mcp.CallToolParams{Meta: meta, Name: tool, Arguments: args}
	if progress != nil {
		p.SetProgressToken(progress)
	}
	return d.Session.CallTool(ctx, p)
}

// RunMeta sets a call's run entries in meta: none for run "",
// mcpfence.MetaRunStart for StartRun, otherwise the handle run as
// mcpfence.MetaRun, with mcpfence.MetaRunEnd when end is set.
func RunMeta(meta mcp.Meta, run string, end bool) {
	switch run {
	case "":
	case StartRun:
		meta[mcpfence.MetaRunStart] = true
	default:
		meta[mcpfence.MetaRun] = run
		if end {
			meta[mcpfence.MetaRunEnd] = true
		}
	}
}

// RunHandle is the run's handle a fenced call's result names in its _meta
// (mcpfence.MetaLease, LeaseInfo.Run), "" when it names none.
func RunHandle(res *mcp.CallToolResult) string {
	if res == nil {
		return ""
	}
	info, _ := res.Meta[mcpfence.MetaLease].(map[string]any)
	h, _ := info["run"].(string)
	return h
}
