package mcpfence

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fencekit/fencekit/lease"
)

// The _meta keys of a tools/call request (and of its result) that this
// package reads and writes. They are reverse-DNS names, as the MCP
// specification asks of _meta keys that are not the protocol's own.
const (
	// MetaConversation names the conversation a call belongs to: a JSON
	// string, the session id of its lease.Key (FromMeta's default source).
	MetaConversation = "io.fencekit/conversation"
	// MetaAccount names the account of the conversation: a JSON string, the
	// account id of its lease.Key, when the server takes it from the request
	// (Config.Account = FromMeta(MetaAccount)).
	MetaAccount = "io.fencekit/account"
	// MetaRun is a run id, a JSON string the client chooses (a UUID, say):
	// every call that presents it runs under the one lease the run's first
	// call obtained, until a call presents MetaRunEnd, the run stays idle
	// for Config.RunIdle, or the lease ends.
	MetaRun = "io.fencekit/run"
	// MetaRunEnd, a JSON boolean, ends the run of MetaRun after this call:
	// its lease is released once the call returns.
	MetaRunEnd = "io.fencekit/run_end"
	// MetaLease is the key of a fenced call's result _meta: a LeaseInfo
	// naming the lease the call ran under.
	MetaLease = "io.fencekit/lease"
)

// MaxRunIDLen is the longest run id (MetaRun) accepted, in bytes.
const MaxRunIDLen = 128

// ErrNoKey means a call named no conversation: the key source found no
// value (no _meta entry, no header). A fenced tool refuses the call with
// cause CauseNoKey.
var ErrNoKey = errors.New("mcpfence: the call names no conversation")

// ErrInvalidMeta is matched by every *MetaError.
var ErrInvalidMeta = errors.New("mcpfence: invalid request metadata")

// MetaError describes a malformed value in a call's _meta or header: a
// wrong JSON type, an empty or oversized id, invalid UTF-8. It matches
// ErrInvalidMeta; the call is refused with cause CauseInvalidMeta before
// any lease statement.
type MetaError struct {
	Field  string // the _meta key or header name
	Reason string
}

func (e *MetaError) Error() string {
	return fmt.Sprintf("mcpfence: invalid %s: %s", e.Field, e.Reason)
}

// Is reports whether target is ErrInvalidMeta.
func (e *MetaError) Is(target error) bool { return target == ErrInvalidMeta }

// A KeySource finds one part of a call's lease key (the conversation, or
// the account) in a tools/call request. It returns ErrNoKey when the
// request carries none and a *MetaError when the value is malformed.
type KeySource func(ctx context.Context, req *mcp.CallToolRequest) (string, error)

// FromMeta reads the string at name in the request's _meta (for example
// MetaConversation). A value of another JSON type, an empty string, one
// longer than lease.MaxIDLen bytes or invalid UTF-8 is a *MetaError.
func FromMeta(name string) KeySource {
	return func(_ context.Context, req *mcp.CallToolRequest) (string, error) {
		if req == nil || req.Params == nil {
			return "", ErrNoKey
		}
		v, ok := req.Params.Meta[name]
		if !ok || v == nil {
			return "", ErrNoKey
		}
		s, ok := v.(string)
		if !ok {
			return "", &MetaError{Field: name, Reason: fmt.Sprintf("want a string, got %s", jsonType(v))}
		}
		return validID(name, s, maxIDLen)
	}
}

// FromHeader reads the HTTP header name of the streamable-HTTP request that
// carried the call (for example "Fencekit-Conversation"). Over a transport
// without headers (stdio) it finds nothing (ErrNoKey). Several values are a
// *MetaError, as are the values FromMeta refuses.
func FromHeader(name string) KeySource {
	canon := http.CanonicalHeaderKey(name)
	return func(_ context.Context, req *mcp.CallToolRequest) (string, error) {
		if req == nil || req.Extra == nil || req.Extra.Header == nil {
			return "", ErrNoKey
		}
		vs := req.Extra.Header[canon]
		switch len(vs) {
		case 0:
			return "", ErrNoKey
		case 1:
			return validID(canon, vs[0], maxIDLen)
		default:
			return "", &MetaError{Field: canon, Reason: fmt.Sprintf("%d values, want one", len(vs))}
		}
	}
}

// FromSession derives the value from the call's MCP session, for servers
// where one session is one conversation (fn might map ServerSession.ID to
// a conversation the server created at initialize). An empty result is
// ErrNoKey.
func FromSession(fn func(ss *mcp.ServerSession) string) KeySource {
	return func(_ context.Context, req *mcp.CallToolRequest) (string, error) {
		if req == nil || req.Session == nil {
			return "", ErrNoKey
		}
		s := fn(req.Session)
		if s == "" {
			return "", ErrNoKey
		}
		return validID("session", s, maxIDLen)
	}
}

// FirstOf tries each source in order and returns the first value found. A
// malformed value (any error but ErrNoKey) ends the search: a request that
// carries a bad conversation id is refused, not matched by a later source.
func FirstOf(srcs ...KeySource) KeySource {
	return func(ctx context.Context, req *mcp.CallToolRequest) (string, error) {
		for _, src := range srcs {
			s, err := src(ctx, req)
			if errors.Is(err, ErrNoKey) {
				continue
			}
			return s, err
		}
		return "", ErrNoKey
	}
}

// Fixed returns a source that always yields s: the account of a stdio
// server started for one account, say.
func Fixed(s string) KeySource {
	return func(context.Context, *mcp.CallToolRequest) (string, error) { return s, nil }
}

// runMeta is the run part of a call's _meta.
type runMeta struct {
	id  string // "" when the call names no run
	end bool
}

func parseRun(req *mcp.CallToolRequest) (runMeta, error) {
	var rm runMeta
	if req.Params == nil {
		return rm, nil
	}
	if v, ok := req.Params.Meta[MetaRun]; ok && v != nil {
		s, ok := v.(string)
		if !ok {
			return rm, &MetaError{Field: MetaRun, Reason: fmt.Sprintf("want a string, got %s", jsonType(v))}
		}
		if err := checkID(MetaRun, s, MaxRunIDLen); err != nil {
			return rm, err
		}
		rm.id = s
	}
	if v, ok := req.Params.Meta[MetaRunEnd]; ok && v != nil {
		b, ok := v.(bool)
		if !ok {
			return rm, &MetaError{Field: MetaRunEnd, Reason: fmt.Sprintf("want a boolean, got %s", jsonType(v))}
		}
		if b && rm.id == "" {
			return rm, &MetaError{Field: MetaRunEnd, Reason: "true without " + MetaRun}
		}
		rm.end = b
	}
	return rm, nil
}

const maxIDLen = lease.MaxIDLen

// validID returns s when checkID admits it, and "" with its error otherwise.
func validID(field, s string, max int) (string, error) {
	if err := checkID(field, s, max); err != nil {
		return "", err
	}
	return s, nil
}

func checkID(field, s string, max int) error {
	switch {
	case s == "":
		return &MetaError{Field: field, Reason: "empty"}
	case len(s) > max:
		return &MetaError{Field: field, Reason: fmt.Sprintf("%d bytes, at most %d", len(s), max)}
	case !utf8.ValidString(s):
		return &MetaError{Field: field, Reason: "not valid UTF-8"}
	}
	return nil
}

// jsonType names the JSON type of a value decoded by encoding/json.
func jsonType(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case float64, int, int64:
		return "a number"
	case bool:
		return "a boolean"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	default:
		return fmt.Sprintf("%T", v)
	}
}
