package httpguard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/fencekit/fencekit/fence"
)

// ProblemContentType is the media type of every error body the middleware
// writes (RFC 9457).
const ProblemContentType = "application/problem+json"

// Problem type URIs. Each names a section of docs/guards.md.
const (
	typeBase = "https://github.com/fencekit/fencekit/blob/main/docs/guards.md#"
	// TypeStaleToken: 409, the presented token is below the resource's mark.
	TypeStaleToken = typeBase + "stale-token"
	// TypeInvalidToken: 400, the token header is missing, repeated or not a
	// canonical positive decimal.
	TypeInvalidToken = typeBase + "invalid-token"
	// TypeInvalidResource: 400, the resource is missing, repeated or not a
	// valid resource name.
	TypeInvalidResource = typeBase + "invalid-resource"
	// TypeTokenReused: 409, the token equals the resource's mark but the
	// run identity differs from the run that set it: the token was issued
	// twice. Retrying cannot succeed.
	TypeTokenReused = typeBase + "token-reused"
	// TypeInvalidRun: 400, the run header is repeated, empty or not a valid
	// run identity (fence.ValidateRun).
	TypeInvalidRun = typeBase + "invalid-run"
	// TypeBusy: 503, the guard could not decide now; retry after Retry-After.
	TypeBusy = typeBase + "busy"
	// TypeInternal: 500, the guard failed; details are not disclosed.
	TypeInternal = typeBase + "internal"
	// TypeOutcomeUnknown: 500, the guard's commit was sent and no answer
	// came back (fence.ErrOutcomeUnknown): the write may have been
	// applied. Read it back, or retry with the same token.
	TypeOutcomeUnknown = typeBase + "outcome-unknown"
	// TypeOutOfScope: 403, the resource lies outside the scope of the
	// request's claim (or the claim has none) and the guard is strict
	// (fence.ErrOutOfScope). Retrying cannot succeed.
	TypeOutOfScope = typeBase + "out-of-scope"
	// TypeInvalidScope: 400, the scope header is repeated, empty or not a
	// valid scope (fence.ValidateScope).
	TypeInvalidScope = typeBase + "invalid-scope"
)

// Problem is an RFC 9457 problem details object, with the extension
// members the middleware uses. Tokens are JSON strings (decimal), so that
// clients whose JSON numbers are doubles do not lose precision.
type Problem struct {
	Type           string `json:"type"`
	Title          string `json:"title"`
	Status         int    `json:"status"`
	Detail         string `json:"detail,omitempty"`
	Resource       string `json:"resource,omitempty"`
	PresentedToken string `json:"presented_token,omitempty"`
	HighestToken   string `json:"highest_token,omitempty"`
	Run            string `json:"run,omitempty"`
	MarkRun        string `json:"mark_run,omitempty"`
	Scope          string `json:"scope,omitempty"`
}

func writeProblem(w http.ResponseWriter, p Problem) {
	body, err := json.Marshal(p)
	if err != nil { // cannot happen: only strings and an int
		body = []byte(`{"type":"about:blank","title":"Internal Server Error","status":500}`)
		p.Status = http.StatusInternalServerError
	}
	h := w.Header()
	h.Set("Content-Type", ProblemContentType)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

// ErrUnexpectedResponse is matched by a *ResponseError: an error response
// that is not a well-formed problem of the middleware (including a 409 whose
// body does not parse strictly).
var ErrUnexpectedResponse = errors.New("httpguard: unexpected error response")

// ResponseError describes an error response ErrorFromResponse could not
// interpret. It matches ErrUnexpectedResponse.
type ResponseError struct {
	StatusCode  int
	ContentType string
	Reason      string
}

// Error implements error.
func (e *ResponseError) Error() string {
	return fmt.Sprintf("httpguard: HTTP %d (%s): %s", e.StatusCode, e.ContentType, e.Reason)
}

// Is reports whether target is ErrUnexpectedResponse.
func (e *ResponseError) Is(target error) bool { return target == ErrUnexpectedResponse }

// ProblemError is a well-formed problem response other than a stale or
// reused token or an out-of-scope resource. It unwraps to fence.ErrBusy,
// fence.ErrInvalidToken, fence.ErrInvalidRun, fence.ErrInvalidResource,
// fence.ErrInvalidScope or fence.ErrOutcomeUnknown for the middleware's
// types of those names.
type ProblemError struct {
	StatusCode int
	Problem    Problem
}

// Error implements error.
func (e *ProblemError) Error() string {
	msg := fmt.Sprintf("httpguard: HTTP %d: %s", e.StatusCode, e.Problem.Title)
	if e.Problem.Detail != "" {
		msg += ": " + e.Problem.Detail
	}
	return msg
}

// Unwrap returns the fence sentinel matching the problem type, if any.
func (e *ProblemError) Unwrap() error {
	switch e.Problem.Type {
	case TypeBusy:
		return fence.ErrBusy
	case TypeInvalidToken:
		return fence.ErrInvalidToken
	case TypeInvalidResource:
		return fence.ErrInvalidResource
	case TypeInvalidRun:
		return fence.ErrInvalidRun
	case TypeInvalidScope:
		return fence.ErrInvalidScope
	case TypeOutcomeUnknown:
		return fence.ErrOutcomeUnknown
	}
	return nil
}

// MaxProblemBytes bounds how much of an error body ErrorFromResponse reads.
const MaxProblemBytes = 64 << 10

// ErrorFromResponse interprets an error response of a fenced service:
//
//   - status below 400: nil;
//   - 409 with a stale-token problem: a *fence.StaleError with the
//     resource and both tokens;
//   - 409 with a token-reused problem: a *fence.ReusedError with the
//     resource, the token and both run identities;
//   - 403 with an out-of-scope problem: a *fence.ScopeError with the
//     resource and the claim's scope (empty when it had none);
//   - any other well-formed problem: a *ProblemError (matching fence.ErrBusy,
//     fence.ErrInvalidToken, fence.ErrInvalidRun, fence.ErrInvalidResource,
//     fence.ErrInvalidScope or fence.ErrOutcomeUnknown for those types);
//   - anything else (not problem+json, malformed JSON, duplicate or mistyped
//     members, status mismatch, invalid tokens, a body over
//     MaxProblemBytes): a *ResponseError.
//
// It reads at most MaxProblemBytes+1 bytes of resp.Body and does not close
// it. It never panics on any body.
func ErrorFromResponse(resp *http.Response) error {
	if resp == nil {
		return &ResponseError{Reason: "nil response"}
	}
	if resp.StatusCode < 400 {
		return nil
	}
	ct := resp.Header.Get("Content-Type")
	bad := func(format string, args ...any) error {
		return &ResponseError{StatusCode: resp.StatusCode, ContentType: ct, Reason: fmt.Sprintf(format, args...)}
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != ProblemContentType {
		return bad("not %s", ProblemContentType)
	}
	if resp.Body == nil {
		return bad("no body")
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxProblemBytes+1))
	if err != nil {
		return bad("reading body: %v", err)
	}
	if len(body) > MaxProblemBytes {
		return bad("body over %d bytes", MaxProblemBytes)
	}
	p, err := parseProblem(body)
	if err != nil {
		return bad("%v", err)
	}
	if p.Status != resp.StatusCode {
		return bad("problem status %d differs from HTTP status", p.Status)
	}
	if p.Type == TypeTokenReused {
		return reusedFromProblem(p, bad)
	}
	if p.Type == TypeOutOfScope {
		return scopeFromProblem(p, bad)
	}
	if p.Type != TypeStaleToken {
		return &ProblemError{StatusCode: resp.StatusCode, Problem: p}
	}
	if resp.StatusCode != http.StatusConflict {
		return bad("stale-token problem with status %d", resp.StatusCode)
	}
	presented, err := fence.Parse(p.PresentedToken)
	if err != nil {
		return bad("presented_token: %v", err)
	}
	highest, err := fence.Parse(p.HighestToken)
	if err != nil {
		return bad("highest_token: %v", err)
	}
	if highest <= presented {
		return bad("highest_token %d not above presented_token %d", highest, presented)
	}
	if err := fence.ValidateResource(p.Resource); err != nil {
		return bad("resource: %v", err)
	}
	return &fence.StaleError{Resource: p.Resource, Presented: presented, Highest: highest}
}

// reusedFromProblem turns a token-reused problem into a *fence.ReusedError,
// or a *ResponseError (through bad) when a member is missing or malformed.
func reusedFromProblem(p Problem, bad func(format string, args ...any) error) error {
	if p.Status != http.StatusConflict {
		return bad("token-reused problem with status %d", p.Status)
	}
	tok, err := fence.Parse(p.PresentedToken)
	if err != nil {
		return bad("presented_token: %v", err)
	}
	for _, run := range []struct{ name, v string }{{"run", p.Run}, {"mark_run", p.MarkRun}} {
		if run.v == "" {
			return bad("%s missing", run.name)
		}
		if err := fence.ValidateRun(run.v); err != nil {
			return bad("%s: %v", run.name, err)
		}
	}
	if p.Run == p.MarkRun {
		return bad("run and mark_run are both %q", p.Run)
	}
	if err := fence.ValidateResource(p.Resource); err != nil {
		return bad("resource: %v", err)
	}
	return &fence.ReusedError{Resource: p.Resource, Token: tok, Run: p.Run, MarkRun: p.MarkRun}
}

// scopeFromProblem turns an out-of-scope problem into a *fence.ScopeError,
// or a *ResponseError (through bad) when a member is missing or malformed.
func scopeFromProblem(p Problem, bad func(format string, args ...any) error) error {
	if p.Status != http.StatusForbidden {
		return bad("out-of-scope problem with status %d", p.Status)
	}
	if err := fence.ValidateResource(p.Resource); err != nil {
		return bad("resource: %v", err)
	}
	if err := fence.ValidateScope(p.Scope); err != nil {
		return bad("scope: %v", err)
	}
	if fence.InScope(p.Scope, p.Resource) {
		return bad("resource %q is inside scope %q", p.Resource, p.Scope)
	}
	return &fence.ScopeError{Resource: p.Resource, Scope: p.Scope}
}

// parseProblem decodes one JSON object strictly: no duplicate members, no
// trailing data, known members with the right JSON types (type, title and
// status required). Unknown members are allowed (RFC 9457 extensions).
func parseProblem(body []byte) (Problem, error) {
	var p Problem
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil {
		return p, fmt.Errorf("not JSON: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return p, errors.New("not a JSON object")
	}
	fields := map[string]json.RawMessage{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return p, fmt.Errorf("bad JSON: %w", err)
		}
		k, ok := kt.(string)
		if !ok {
			return p, errors.New("bad JSON member name")
		}
		if _, dup := fields[k]; dup {
			return p, fmt.Errorf("duplicate member %q", k)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return p, fmt.Errorf("bad JSON value of %q: %w", k, err)
		}
		fields[k] = raw
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return p, fmt.Errorf("bad JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return p, errors.New("trailing data after the JSON object")
	}
	str := func(name string, dst *string, required bool) error {
		raw, ok := fields[name]
		if !ok {
			if required {
				return fmt.Errorf("member %q missing", name)
			}
			return nil
		}
		if len(raw) == 0 || raw[0] != '"' {
			return fmt.Errorf("member %q is not a string", name)
		}
		return json.Unmarshal(raw, dst)
	}
	for _, f := range []struct {
		name     string
		dst      *string
		required bool
	}{
		{"type", &p.Type, true}, {"title", &p.Title, true}, {"detail", &p.Detail, false},
		{"resource", &p.Resource, false}, {"presented_token", &p.PresentedToken, false},
		{"highest_token", &p.HighestToken, false}, {"run", &p.Run, false}, {"mark_run", &p.MarkRun, false},
		{"scope", &p.Scope, false},
	} {
		if err := str(f.name, f.dst, f.required); err != nil {
			return p, err
		}
	}
	raw, ok := fields["status"]
	if !ok {
		return p, errors.New(`member "status" missing`)
	}
	var n json.Number
	if len(raw) == 0 || raw[0] < '0' || raw[0] > '9' {
		return p, errors.New(`member "status" is not a number`)
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return p, errors.New(`member "status" is not a number`)
	}
	st, err := n.Int64()
	if err != nil || st < 100 || st > 599 {
		return p, fmt.Errorf(`member "status" %s is not an HTTP status`, n)
	}
	p.Status = int(st)
	return p, nil
}
