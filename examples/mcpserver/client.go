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

// Call calls tool with args in the device's conversation; run, when not
// empty, makes the call part of that run (end: its last call); progress,
// when not nil, asks for progress notifications with that token.
func (d *Device) Call(ctx context.Context, tool string, args map[string]any, run string, end bool, progress any) (*mcp.CallToolResult, error) {
	meta := mcp.Meta{mcpfence.MetaAccount: d.Account, mcpfence.MetaConversation: d.Conv}
	if run != "" {
		meta[mcpfence.MetaRun] = run
	}
	if end {
		meta[mcpfence.MetaRunEnd] = true
	}
	p := &mcp.CallToolParams{Meta: meta, Name: tool, Arguments: args}
	if progress != nil {
		p.SetProgressToken(progress)
	}
	return d.Session.CallTool(ctx, p)
}
