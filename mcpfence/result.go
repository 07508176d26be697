package mcpfence

import (
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease"
)

// The causes a refused or failed fenced call names in its Refusal.
const (
	// CauseTakenOver: another device took the conversation over ("continue
	// here") while this call or its run held it; the call's work was
	// stopped (its ctx ended with lease.ErrTakenOver) or not started.
	CauseTakenOver = "taken_over"
	// CauseStale: a guard refused one of the call's writes because a newer
	// holder had written (a *fence.StaleError).
	CauseStale = "stale"
	// CauseHeld: another run holds the conversation (policy Acquire, or
	// Wait after Config.MaxWait). Nothing ran.
	CauseHeld = "held"
	// CauseOutcomeUnknown: a guarded write's request left and no reply came
	// back (fence.ErrOutcomeUnknown): it may have been applied. Read back
	// before retrying, or retry in the same run (same token).
	CauseOutcomeUnknown = "outcome_unknown"
	// CauseLost: the lease ended otherwise (renewal refused, trust deadline
	// passed, Manager closed) before the call finished.
	CauseLost = "lost"
	// CauseRunEnded: the run named in MetaRun has ended (released by
	// MetaRunEnd, idle for Config.RunIdle, its first call failed) or does
	// not hold the call's conversation: start a new run.
	CauseRunEnded = "run_ended"
	// CauseRequestConflict: the call's request id (MetaRequest) was first
	// used for another tool or other arguments. Nothing ran.
	CauseRequestConflict = "request_conflict"
	// CauseRequestRunning: the first call of the request id is still
	// running after Config.MaxWait; call again later with the same id.
	// Nothing ran.
	CauseRequestRunning = "request_running"
	// CauseRequestUnknown: the first call of the request id started its
	// tool and kept no result: its lease ended (displaced, crashed) before
	// it finished, its handler returned a protocol error, or its result was
	// too large to keep. It may have written. Nothing ran again.
	CauseRequestUnknown = "request_unknown"
	// CauseUnknownTool: the Fence has no policy for the tool (neither
	// Config.Tools nor Config.Default names one). Nothing was read or sent.
	CauseUnknownTool = "unknown_tool"
	// CauseUnauthorized: the caller may not use the account (Config.Authorize
	// or the Manager's Authorizer refused). No lease statement was sent.
	CauseUnauthorized = "unauthorized"
	// CauseNoKey: the call names no conversation (ErrNoKey).
	CauseNoKey = "no_key"
	// CauseInvalidMeta: the call's _meta or header is malformed
	// (*MetaError, or an id lease.Key.Validate refuses).
	CauseInvalidMeta = "invalid_meta"
	// CauseCanceled: the call was cancelled (notifications/cancelled) or its
	// request ended before the lease was obtained.
	CauseCanceled = "canceled"
	// CauseUnavailable: the lease database failed or was busy; nothing ran.
	CauseUnavailable = "unavailable"
)

// Refusal is the structured content of a fenced call's error result
// (isError true): why the call was refused or stopped, and who owns the
// conversation when that is known. Tokens are decimal JSON strings.
type Refusal struct {
	Cause        string `json:"cause"`   // one of the Cause* constants
	Message      string `json:"message"` // for people (and models)
	Tool         string `json:"tool,omitempty"`
	Conversation string `json:"conversation,omitempty"`
	// Token is the token this call ran under, when it obtained one.
	Token fence.Token `json:"token,omitempty"`
	// Owner is the conversation's current owner, when known: the holder
	// that refused an Acquire, or the run that took over.
	Owner *Owner `json:"owner,omitempty"`
	// Presented and Highest are the stale write's token and the token the
	// resource had accepted (CauseStale); Resource names the resource.
	Presented fence.Token `json:"presented,omitempty"`
	Highest   fence.Token `json:"highest,omitempty"`
	Resource  string      `json:"resource,omitempty"`
	// Overtaken: the stale write's reply was lost before it was refused;
	// it may have been applied and then overwritten (fence.StaleError).
	Overtaken bool `json:"overtaken,omitempty"`
}

// Owner names the last grant of a conversation's lease: who owns the
// conversation now (Held), or who took it last and has since released it.
type Owner struct {
	Holder string      `json:"holder,omitempty"` // the grant's label (lease.WithHolder)
	Token  fence.Token `json:"token"`
	RunID  string      `json:"run_id,omitempty"` // the lease's run_id
	Held   bool        `json:"held"`             // the grant still holds the lease
}

// LeaseInfo is what a fenced call's successful result carries in its _meta
// under MetaLease: the lease it ran under.
type LeaseInfo struct {
	Conversation string      `json:"conversation"`
	Token        fence.Token `json:"token"`
	Holder       string      `json:"holder,omitempty"`
	RunID        string      `json:"run_id"` // the lease's run_id
	// Run is the run's handle, when the call started (MetaRunStart) or
	// continued (MetaRun) a run: the value later calls present as MetaRun.
	// It equals RunID.
	Run string `json:"run,omitempty"`
}

// RefusalError is a Refusal as a Go error, for code that handles a refused
// call on the server's side (Config.OnRefusal).
type RefusalError struct{ Refusal Refusal }

func (e *RefusalError) Error() string {
	return "mcpfence: " + e.Refusal.Cause + ": " + e.Refusal.Message
}

// RefusalFrom decodes the Refusal of a client-side *mcp.CallToolResult:
// ok is false when the result is not an error result carrying one.
func RefusalFrom(res *mcp.CallToolResult) (Refusal, bool) {
	var r Refusal
	if res == nil || !res.IsError || res.StructuredContent == nil {
		return r, false
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return r, false
	}
	if err := json.Unmarshal(b, &r); err != nil || r.Cause == "" {
		return r, false
	}
	return r, true
}

// result builds the error result of r.
func (r Refusal) result() *mcp.CallToolResult {
	res := &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: r.text()}},
		StructuredContent: r,
	}
	res.SetError(&RefusalError{Refusal: r})
	return res
}

func (r Refusal) text() string {
	s := fmt.Sprintf("%s: %s", r.Cause, r.Message)
	if r.Owner != nil {
		if r.Owner.Held {
			s += fmt.Sprintf(" (the conversation is owned by %s with token %d)", ownerName(r.Owner.Holder), r.Owner.Token)
		} else {
			s += fmt.Sprintf(" (the conversation was last taken by %s with token %d, who has released it)", ownerName(r.Owner.Holder), r.Owner.Token)
		}
	}
	return s
}

func ownerName(h string) string {
	if h == "" {
		return "an unnamed run"
	}
	return fmt.Sprintf("%q", h)
}

func ownerOf(o lease.Ownership) *Owner {
	if o.Token == 0 {
		return nil
	}
	return &Owner{Holder: o.Holder, Token: o.Token, RunID: o.RunID.String(), Held: o.Held()}
}
