package mcpfence

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
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
	// MetaRunStart, a JSON boolean, starts a run with this call: the call
	// obtains the conversation's lease by its tool's policy, and its result
	// names the run's handle in its _meta (MetaLease, LeaseInfo.Run). The
	// run lives in the database between its calls (a parked grant), so a
	// later call may reach any replica.
	MetaRunStart = "io.fencekit/run_start"
	// MetaRun is a run's handle, a JSON string: the lease's run_id (a UUID)
	// that the run's first call returned in LeaseInfo.Run. A call that
	// presents it continues the run under its lease (same token), on any
	// replica, if the run still holds the call's conversation (account and
	// conversation): the handle is checked against the lease's row, it is
	// not bound to an MCP session, and it is no credential (the call is
	// authorized as any other). A run ends at MetaRunEnd, when idle for
	// Config.RunIdle, when taken over, or when its first call failed.
	MetaRun = "io.fencekit/run"
	// MetaRunEnd, a JSON boolean, ends the run of MetaRun after this call:
	// its lease is released once the call returns.
	MetaRunEnd = "io.fencekit/run_end"
	// MetaRequest, a JSON string, is the client's own id for one logical
	// call (at most MaxRequestIDLen bytes, checked as the other ids). A
	// later call with the same id in the same conversation, on any replica,
	// gets the first call's result (waiting for it while the first call
	// runs) and runs nothing; with another tool or other arguments it is
	// refused with CauseRequestConflict. Results are kept in the database
	// (Config.Requests) for Config.RequestRetention. Unfenced tools ignore
	// it.
	MetaRequest = "io.fencekit/request"
	// MetaLease is the key of a fenced call's result _meta: a LeaseInfo
	// naming the lease the call ran under.
	MetaLease = "io.fencekit/lease"
)

// MaxRunIDLen is the longest run handle (MetaRun) accepted, in bytes.
const MaxRunIDLen = 128

// ErrNoKey means a call named no conversation or no account: the key
// source found no value (no _meta entry, no header). A fenced tool refuses
// the call with cause CauseNoKey. The errors of FromMeta, FromHeader and
// FromSession that match it name what was looked for.
var ErrNoKey = errors.New("mcpfence: the call names no key")

// noKeyError is ErrNoKey for one place a source looked in.
type noKeyError struct{ where string }

func (e *noKeyError) Error() string        { return "mcpfence: the call names no key (" + e.where + ")" }
func (e *noKeyError) Is(target error) bool { return target == ErrNoKey }

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
			return "", &noKeyError{where: fmt.Sprintf("_meta %q", name)}
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
			return "", &noKeyError{where: "header " + canon}
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
// When none finds a value the error names every place looked in.
func FirstOf(srcs ...KeySource) KeySource {
	return func(ctx context.Context, req *mcp.CallToolRequest) (string, error) {
		var where []string
		for _, src := range srcs {
			s, err := src(ctx, req)
			if errors.Is(err, ErrNoKey) {
				var nk *noKeyError
				if errors.As(err, &nk) {
					where = append(where, nk.where)
				}
				continue
			}
			return s, err
		}
		if len(where) == 0 {
			return "", ErrNoKey
		}
		return "", &noKeyError{where: strings.Join(where, " or ")}
	}
}

// Fixed returns a source that always yields s: the account of a stdio
// server started for one account, say.
func Fixed(s string) KeySource {
	return func(context.Context, *mcp.CallToolRequest) (string, error) { return s, nil }
}

// runMeta is the run part of a call's _meta.
type runMeta struct {
	id    uuid.UUID // uuid.Nil when the call names no run
	start bool      // MetaRunStart
	end   bool      // MetaRunEnd

	request *requestCall // MetaRequest; nil when the call names none
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
		id, err := uuid.Parse(s)
		if err != nil || id == uuid.Nil {
			return rm, &MetaError{Field: MetaRun, Reason: "not a run handle (a UUID returned by the run's first call, with " + MetaRunStart + ")"}
		}
		rm.id = id
	}
	for _, f := range []struct {
		name string
		dst  *bool
	}{{MetaRunStart, &rm.start}, {MetaRunEnd, &rm.end}} {
		v, ok := req.Params.Meta[f.name]
		if !ok || v == nil {
			continue
		}
		b, ok := v.(bool)
		if !ok {
			return rm, &MetaError{Field: f.name, Reason: fmt.Sprintf("want a boolean, got %s", jsonType(v))}
		}
		*f.dst = b
	}
	switch {
	case rm.start && rm.id != uuid.Nil:
		return rm, &MetaError{Field: MetaRunStart, Reason: "true with " + MetaRun + ": a call starts a run or continues one"}
	case rm.start && rm.end:
		return rm, &MetaError{Field: MetaRunStart, Reason: "true with " + MetaRunEnd + ": a run of one call is a call without a run"}
	case rm.end && rm.id == uuid.Nil:
		return rm, &MetaError{Field: MetaRunEnd, Reason: "true without " + MetaRun}
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

// checkID admits a non-empty id of at most max bytes of valid UTF-8 with
// no control character and no U+FFFD. JSON decoding (the MCP SDK's, before
// any middleware sees the request) turns every invalid byte and every lone
// surrogate escape ("\ud800") into U+FFFD, so two different ids a client
// sent could arrive as one: an id holding U+FFFD is refused, as the
// altered id it most likely is.
func checkID(field, s string, max int) error {
	switch {
	case s == "":
		return &MetaError{Field: field, Reason: "empty"}
	case len(s) > max:
		return &MetaError{Field: field, Reason: fmt.Sprintf("%d bytes, at most %d", len(s), max)}
	case !utf8.ValidString(s):
		return &MetaError{Field: field, Reason: "not valid UTF-8"}
	}
	for i, r := range s {
		switch {
		case r == utf8.RuneError:
			return &MetaError{Field: field, Reason: fmt.Sprintf("contains U+FFFD at byte %d: the id was not valid UTF-8 as sent (JSON decoding replaced it) or holds the replacement character", i)}
		case unicode.IsControl(r):
			return &MetaError{Field: field, Reason: fmt.Sprintf("contains control character %U at byte %d", r, i)}
		}
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
