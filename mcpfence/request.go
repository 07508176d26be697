package mcpfence

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease"
)

// MaxRequestIDLen is the longest request id (MetaRequest) accepted, in
// bytes.
const MaxRequestIDLen = 255

// MaxRequestResult is the largest result, as JSON, kept for a request id.
// A larger result is returned to its own call; a duplicate gets a Refusal
// with CauseRequestUnknown saying it was not kept.
const MaxRequestResult = 4 << 20

// DefaultRequestRetention is Config.RequestRetention's default;
// MinRequestRetention is its least value.
const (
	DefaultRequestRetention = 24 * time.Hour
	MinRequestRetention     = time.Minute
)

// requestCall is a call that named a request id.
type requestCall struct {
	id   string
	hash [32]byte
}

// requestRow is a row of fencekit_mcp_requests.
type requestRow struct {
	hash   []byte
	done   bool
	result []byte
	run    uuid.UUID
	token  fence.Token
}

// parseRequest reads MetaRequest: nil when the call names none.
func parseRequest(req *mcp.CallToolRequest) (*requestCall, error) {
	v, ok := req.Params.Meta[MetaRequest]
	if !ok || v == nil {
		return nil, nil
	}
	s, ok := v.(string)
	if !ok {
		return nil, &MetaError{Field: MetaRequest, Reason: fmt.Sprintf("want a string, got %s", jsonType(v))}
	}
	if err := checkID(MetaRequest, s, MaxRequestIDLen); err != nil {
		return nil, err
	}
	return &requestCall{id: s, hash: callHash(req.Params.Name, req.Params.Arguments)}, nil
}

// callHash is the SHA-256 of the tool's name and its arguments, the JSON
// re-encoded (object keys sorted, numbers as sent) so that the same
// arguments sent with other spacing or key order hash alike.
func callHash(tool string, args json.RawMessage) [32]byte {
	canon := []byte("null")
	if len(bytes.TrimSpace(args)) > 0 {
		canon = args
		dec := json.NewDecoder(bytes.NewReader(args))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err == nil {
			if b, err := json.Marshal(v); err == nil {
				canon = b
			}
		}
	}
	h := sha256.New()
	h.Write([]byte(tool))
	h.Write([]byte{0})
	h.Write(canon)
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

// requestTable is the quoted, schema-qualified table name.
func (f *Fence) requestTable() string {
	return `"` + f.cfg.RequestSchema + `".fencekit_mcp_requests`
}

// lookupRequest reads key's row of rq; nil when there is none.
func (f *Fence) lookupRequest(ctx context.Context, key lease.Key, rq *requestCall) (*requestRow, error) {
	var (
		row   requestRow
		state string
		run   string
		token int64
	)
	err := f.cfg.Requests.QueryRow(ctx, `SELECT call_hash, state, result, run_id::text, fence_token FROM `+f.requestTable()+`
 WHERE account_id = $1::text AND session_id = $2::text AND request_id = $3::text`, key.AccountID, key.SessionID, rq.id).
		Scan(&row.hash, &state, &row.result, &run, &token)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("mcpfence: read request %q: %w", rq.id, err)
	}
	row.done, row.token = state == "done", fence.Token(token)
	if row.run, err = uuid.Parse(run); err != nil {
		return nil, fmt.Errorf("mcpfence: request %q: run_id %q: %w", rq.id, run, err)
	}
	return &row, nil
}

// claimRequest inserts rq's 'running' row for the call that holds l, in
// one transaction that first checks, and share-locks, l's lease row
// (lease.CheckClaimTx): the row is inserted only while l holds the key. It
// also deletes up to 64 rows older than RequestRetention. claimed is false
// when a row for rq already exists. The transaction is bounded by
// ReleaseTimeout; when it fails, a claim that may have committed (its
// COMMIT was sent) is deleted again, as the tool will not run.
func (f *Fence) claimRequest(ctx context.Context, key lease.Key, rq *requestCall, l *lease.Lease) (claimed bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.ReleaseTimeout)
	defer cancel()
	committing := false
	defer func() {
		if err != nil && committing {
			f.unclaimRequest(ctx, key, rq, l)
		}
	}()
	tx, err := f.cfg.Requests.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	claim := fence.Claim{Token: l.Token(), Run: l.RunID().String(), Scope: key.Scope()}
	if err = lease.CheckClaimTx(ctx, tx, f.cfg.RequestSchema, key, claim); err != nil {
		return false, err
	}
	retention := f.cfg.RequestRetention.Microseconds()
	if _, err = tx.Exec(ctx, `DELETE FROM `+f.requestTable()+` WHERE ctid IN (
    SELECT ctid FROM `+f.requestTable()+`
     WHERE created_at < clock_timestamp() - $1::bigint * interval '1 microsecond'
     ORDER BY created_at LIMIT 64 FOR UPDATE SKIP LOCKED)
 OR (account_id = $2::text AND session_id = $3::text AND request_id = $4::text
     AND created_at < clock_timestamp() - $1::bigint * interval '1 microsecond')`,
		retention, key.AccountID, key.SessionID, rq.id); err != nil {
		return false, err
	}
	tag, err := tx.Exec(ctx, `INSERT INTO `+f.requestTable()+`
    (account_id, session_id, request_id, call_hash, run_id, fence_token, created_at)
VALUES ($1::text, $2::text, $3::text, $4::bytea, $5::text::uuid, $6::bigint, clock_timestamp())
ON CONFLICT DO NOTHING`, key.AccountID, key.SessionID, rq.id, rq.hash[:], l.RunID().String(), int64(l.Token()))
	if err != nil {
		return false, err
	}
	committing = true
	if err = tx.Commit(ctx); err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// unclaimRequest deletes l's 'running' row of rq, on a context of its own
// bounded by ReleaseTimeout: the claim of a call whose tool will not run.
func (f *Fence) unclaimRequest(ctx context.Context, key lease.Key, rq *requestCall, l *lease.Lease) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.cfg.ReleaseTimeout)
	defer cancel()
	if _, err := f.cfg.Requests.Exec(dctx, `DELETE FROM `+f.requestTable()+`
 WHERE account_id = $1::text AND session_id = $2::text AND request_id = $3::text
   AND run_id = $4::text::uuid AND fence_token = $5::bigint AND state = 'running'`,
		key.AccountID, key.SessionID, rq.id, l.RunID().String(), int64(l.Token())); err != nil {
		f.cfg.Logger.Warn("mcpfence: a request's claim could not be removed", "request", rq.id, "error", err)
	}
}

// finishRequest keeps res as rq's result, on a context of its own bounded
// by ReleaseTimeout. A call whose handler returned a Go error (a JSON-RPC
// error, no result) keeps none: its row stays 'running' and, once its lease
// has ended, a duplicate is refused with CauseRequestUnknown.
func (f *Fence) finishRequest(ctx context.Context, key lease.Key, rq *requestCall, l *lease.Lease, res mcp.Result, err error) {
	if err != nil || res == nil {
		return
	}
	b, merr := json.Marshal(res)
	if merr != nil {
		f.cfg.Logger.Warn("mcpfence: a request's result could not be kept", "request", rq.id, "error", merr)
		return
	}
	if len(b) > MaxRequestResult {
		r := Refusal{Cause: CauseRequestUnknown, Conversation: key.SessionID, Token: l.Token(),
			Message: fmt.Sprintf("the first call of request %q ran; its result (%d bytes, more than %d) was not kept", rq.id, len(b), MaxRequestResult)}
		if b, merr = json.Marshal(r.result()); merr != nil {
			return
		}
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.cfg.ReleaseTimeout)
	defer cancel()
	_, uerr := f.cfg.Requests.Exec(sctx, `UPDATE `+f.requestTable()+`
   SET state = 'done', result = $4::bytea, done_at = clock_timestamp()
 WHERE account_id = $1::text AND session_id = $2::text AND request_id = $3::text
   AND run_id = $5::text::uuid AND fence_token = $6::bigint AND state = 'running'`,
		key.AccountID, key.SessionID, rq.id, b, l.RunID().String(), int64(l.Token()))
	if uerr != nil {
		f.cfg.Logger.Warn("mcpfence: a request's result could not be kept", "request", rq.id, "error", uerr)
	}
}

// awaitRequest answers a call whose request id already has a row: the kept
// result, or (while the call that owns the row still holds the lease with
// a call running) the result once kept, waiting with backoff for at most
// MaxWait. A row whose owner no longer holds the lease, or holds it parked
// (its call returned), without a result is CauseRequestUnknown; another
// tool or other arguments are CauseRequestConflict.
func (f *Fence) awaitRequest(ctx context.Context, req *mcp.CallToolRequest, key lease.Key, rq *requestCall, row *requestRow) (mcp.Result, *Refusal) {
	wctx, cancel := context.WithTimeout(ctx, f.cfg.MaxWait)
	defer cancel()
	base := Refusal{Conversation: key.SessionID}
	for backoff := 5 * time.Millisecond; ; backoff = min(2*backoff, 100*time.Millisecond) {
		if row == nil {
			r := base
			r.Cause, r.Message = CauseRequestUnknown, fmt.Sprintf("request %q has no kept result (it is older than the server's retention window, or was removed)", rq.id)
			return nil, &r
		}
		if !bytes.Equal(row.hash, rq.hash[:]) {
			r := base
			r.Cause, r.Message = CauseRequestConflict, fmt.Sprintf("request %q was first called with another tool or other arguments: nothing ran", rq.id)
			return nil, &r
		}
		if row.done {
			res, err := replayResult(req, row.result)
			if err != nil {
				r := base
				r.Cause, r.Message = CauseUnavailable, err.Error()
				return nil, &r
			}
			return res, nil
		}
		o, err := f.cfg.Manager.Inspect(wctx, key)
		running := o.Held() && !o.Parked && o.RunID == row.run && o.Token == row.token
		if err == nil && !running {
			// The owner's call is over: read once more, as its result is
			// kept before its lease is released or parked.
			if row, err = f.lookupRequest(wctx, key, rq); err == nil && row != nil && !row.done {
				r := base
				r.Cause, r.Token = CauseRequestUnknown, row.token
				r.Message = fmt.Sprintf("the first call of request %q (token %d) no longer holds the conversation and kept no result: it may have written; read back before calling again with a new request id", rq.id, row.token)
				r.Owner = ownerOf(o)
				return nil, &r
			}
			if err == nil {
				continue
			}
		}
		if err == nil {
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
				row, err = f.lookupRequest(wctx, key, rq)
			case <-wctx.Done():
				t.Stop()
				err = wctx.Err()
			}
		}
		if err != nil {
			r := base
			switch {
			case ctx.Err() != nil:
				r.Cause, r.Message = CauseCanceled, fmt.Sprintf("the call ended while request %q was running: %v", rq.id, context.Cause(ctx))
			case wctx.Err() != nil:
				r.Cause, r.Message = CauseRequestRunning, fmt.Sprintf("the first call of request %q was still running after %s: call again later with the same request id", rq.id, f.cfg.MaxWait)
			default:
				r.Cause, r.Message = CauseUnavailable, err.Error()
			}
			return nil, &r
		}
	}
}

// replayResult decodes a kept result for req: with the resultType a
// 2026-07-28 client requires, and without it for earlier revisions.
func replayResult(req *mcp.CallToolRequest, b []byte) (*mcp.CallToolResult, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("mcpfence: a kept result: %w", err)
	}
	delete(m, "resultType")
	if v, _ := req.Params.Meta[mcp.MetaKeyProtocolVersion].(string); v >= Revision20260728 {
		m["resultType"] = json.RawMessage(`"complete"`)
	}
	nb, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	var res mcp.CallToolResult
	if err := json.Unmarshal(nb, &res); err != nil {
		return nil, fmt.Errorf("mcpfence: a kept result: %w", err)
	}
	return &res, nil
}

// requestError turns an error of claimRequest into a Refusal.
func requestError(ctx context.Context, key lease.Key, l *lease.Lease, err error) *Refusal {
	r := &Refusal{Conversation: key.SessionID, Token: l.Token(), Message: "claiming the request id: " + err.Error() + ": nothing ran"}
	switch {
	case errors.Is(err, fence.ErrStale):
		r.Cause = CauseLost
	case ctx.Err() != nil:
		r.Cause = CauseCanceled
	default:
		r.Cause = CauseUnavailable
	}
	return r
}
