package mcpfence

import (
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ErrClientGone is the cause with which a fenced call's context ends when
// the client that sent it can no longer receive its result: the HTTP
// request that carried the call ended (the connection dropped, the client
// gave up waiting) or the client closed its MCP session (HTTP DELETE).
var ErrClientGone = errors.New("mcpfence: the client is gone (its request or MCP session ended)")

// Revision20260728 is the first MCP protocol revision without sessions
// (SEP-2575, SEP-2567): every request carries its protocol version, and a
// server may answer it on any replica. HTTPHandler serves requests whose
// Mcp-Protocol-Version header is this or later statelessly.
const Revision20260728 = "2026-07-28"

// callHeader is the request header HTTPHandler sets on every POST it
// passes on (after deleting any value the client sent): the id under which
// the POST's context is registered, so that the Middleware finds it in
// the call's req.Extra.Header.
const callHeader = "Fencekit-Mcp-Call"

const (
	headerProtocolVersion = "Mcp-Protocol-Version"
	headerSessionID       = "Mcp-Session-Id"
)

// httpCall is one POST in flight: its context, ended with ErrClientGone
// when the client goes away, and the MCP session it belongs to ("" for a
// stateless request).
type httpCall struct {
	ctx     context.Context
	cancel  context.CancelCauseFunc
	session string
}

// httpCalls registers the POSTs in flight of an HTTPHandler.
type httpCalls struct {
	mu    sync.Mutex
	calls map[string]*httpCall
}

func (c *httpCalls) add(id string, hc *httpCall) {
	c.mu.Lock()
	if c.calls == nil {
		c.calls = map[string]*httpCall{}
	}
	c.calls[id] = hc
	c.mu.Unlock()
}

func (c *httpCalls) remove(id string) {
	c.mu.Lock()
	delete(c.calls, id)
	c.mu.Unlock()
}

func (c *httpCalls) get(id string) *httpCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[id]
}

// endSession ends the calls of the MCP session id.
func (c *httpCalls) endSession(id string) {
	c.mu.Lock()
	var ended []*httpCall
	for _, hc := range c.calls {
		if hc.session == id {
			ended = append(ended, hc)
		}
	}
	c.mu.Unlock()
	for _, hc := range ended {
		hc.cancel(ErrClientGone)
	}
}

// HTTPHandler serves MCP over streamable HTTP for both protocol
// revisions from one endpoint, with f's Middleware told when a call's
// client is gone:
//
//   - A request whose Mcp-Protocol-Version header is Revision20260728 or
//     later is served statelessly (mcp.StreamableHTTPOptions.Stateless):
//     no MCP session, any replica may answer it.
//   - Every other request (initialize, and the requests of a 2025-11-25
//     session, with its Mcp-Session-Id) is served with sessions.
//
// A fenced call's context ends with ErrClientGone as soon as the HTTP
// request that carried it ends before its result was written (the
// connection dropped, the client's own timeout), and when its client closes
// the MCP session (DELETE): the call stops waiting for the lease and its
// tool's ctx ends, and a call whose client is gone by the time its lease
// was granted releases the lease without running the tool. The MCP SDK
// does neither by itself for session-bound requests. getServer and opts are
// those of mcp.NewStreamableHTTPHandler (opts may be nil; its Stateless
// field is ignored). Install f.Middleware on every server getServer
// returns.
func (f *Fence) HTTPHandler(getServer func(*http.Request) *mcp.Server, opts *mcp.StreamableHTTPOptions) http.Handler {
	var base mcp.StreamableHTTPOptions
	if opts != nil {
		base = *opts
	}
	sessions, stateless := base, base
	sessions.Stateless = false
	stateless.Stateless = true
	stateless.PropagateRequestCancellation = true
	hSessions := mcp.NewStreamableHTTPHandler(getServer, &sessions)
	hStateless := mcp.NewStreamableHTTPHandler(getServer, &stateless)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next := hSessions
		if v := r.Header.Get(headerProtocolVersion); v != "" && v >= Revision20260728 {
			next = hStateless
		}
		switch r.Method {
		case http.MethodPost:
			id := rand.Text()
			ctx, cancel := context.WithCancelCause(r.Context())
			defer cancel(nil)
			f.http.add(id, &httpCall{ctx: ctx, cancel: cancel, session: r.Header.Get(headerSessionID)})
			defer f.http.remove(id)
			r = r.Clone(r.Context())
			r.Header.Del(callHeader)
			r.Header.Set(callHeader, id)
			// The request's own context ends when the client goes, which
			// ends ctx; a POST that returns normally has written its
			// results, so ending ctx then ends nothing still running.
			context.AfterFunc(r.Context(), func() { cancel(ErrClientGone) }) //nolint:contextcheck // the request's end ends the call
		case http.MethodDelete:
			if id := r.Header.Get(headerSessionID); id != "" {
				f.http.endSession(id)
			}
		}
		next.ServeHTTP(w, r)
	})
}

// clientGone returns the context of the HTTP request that carried req, when
// HTTPHandler served it, and nil otherwise.
func (f *Fence) clientGone(req *mcp.CallToolRequest) context.Context {
	if req == nil || req.Extra == nil || req.Extra.Header == nil {
		return nil
	}
	id := req.Extra.Header.Get(callHeader)
	if id == "" {
		return nil
	}
	if hc := f.http.get(id); hc != nil {
		return hc.ctx
	}
	return nil
}
