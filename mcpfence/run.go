package mcpfence

import (
	"context"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fencekit/fencekit/lease"
)

// run is a multi-call run: the lease its first call obtained, shared by
// every call that presents its MetaRun id from the same MCP session.
type run struct {
	id      string
	key     lease.Key
	session *mcp.ServerSession

	ready chan struct{} // closed once the first call obtained the lease (or failed)
	l     *lease.Lease  // nil when obtaining failed
	fail  *Refusal      // the first call's refusal

	// guarded by Fence.mu
	calls    int       // calls running
	lastUsed time.Time // when the last call ended
	ended    bool      // MetaRunEnd seen or reaped: released, never reused
}

// joinRun finds or starts the run id and returns its live lease.
func (f *Fence) joinRun(ctx context.Context, policy Policy, req *mcp.CallToolRequest, key lease.Key, id string) (*run, *lease.Lease, *Refusal) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, nil, &Refusal{Cause: CauseUnavailable, Message: "the server is shutting down", Conversation: key.SessionID}
	}
	r, ok := f.runs[id]
	if !ok {
		r = &run{id: id, key: key, session: req.Session, ready: make(chan struct{})}
		f.runs[id] = r
		r.calls++
		f.mu.Unlock()
		r.l, r.fail = f.obtain(ctx, policy, req, key)
		f.mu.Lock()
		if r.fail != nil {
			delete(f.runs, id) // a refused first call starts no run
		}
		close(r.ready)
		f.mu.Unlock()
		if r.fail != nil {
			return nil, nil, r.fail
		}
		return r, r.l, nil
	}
	if r.key != key || r.session != req.Session {
		f.mu.Unlock()
		return nil, nil, &Refusal{Cause: CauseInvalidMeta, Conversation: key.SessionID,
			Message: fmt.Sprintf("run %q belongs to another conversation or MCP session: start a run of your own", id)}
	}
	r.calls++
	f.mu.Unlock()
	select {
	case <-r.ready:
	case <-ctx.Done():
		f.leaveRun(ctx, r, false)
		return nil, nil, &Refusal{Cause: CauseCanceled, Message: "cancelled while the run's first call obtained the lease", Conversation: key.SessionID}
	}
	if r.fail != nil {
		f.leaveRun(ctx, r, false)
		return nil, nil, r.fail
	}
	f.mu.Lock()
	ended := r.ended
	f.mu.Unlock()
	if ended || r.l.Err() != nil {
		rf := Refusal{Conversation: key.SessionID, Token: r.l.Token()}
		if r.l.Err() != nil {
			rf = f.endedRefusal(r.l, rf)
		} else {
			rf.Cause, rf.Message = CauseRunEnded, "the run has ended: start a new one"
		}
		f.leaveRun(ctx, r, false)
		return nil, nil, &rf
	}
	return r, r.l, nil
}

// leaveRun ends one call of r; end (MetaRunEnd) releases the run's lease.
func (f *Fence) leaveRun(ctx context.Context, r *run, end bool) {
	f.mu.Lock()
	r.calls--
	r.lastUsed = time.Now()
	release := end && !r.ended
	if end {
		r.ended = true
	}
	f.mu.Unlock()
	if release && r.l != nil {
		f.release(ctx, r.l)
	}
}

func (f *Fence) releaseRun(r *run) error {
	<-r.ready
	if r.l == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.cfg.ReleaseTimeout)
	defer cancel()
	_, err := r.l.Release(ctx)
	return err
}

// reap releases runs idle for RunIdle and forgets ended runs after as long
// (until then a later call of an ended run is told why it ended).
func (f *Fence) reap() {
	defer close(f.done)
	t := time.NewTicker(f.cfg.RunIdle / 4)
	defer t.Stop()
	for {
		select {
		case <-f.stop:
			return
		case <-t.C:
		}
		var idle []*run
		f.mu.Lock()
		for id, r := range f.runs {
			if r.calls > 0 || time.Since(r.lastUsed) < f.cfg.RunIdle {
				continue
			}
			if !r.ended && r.l != nil && r.l.Err() == nil {
				idle = append(idle, r)
			}
			r.ended = true
			delete(f.runs, id)
		}
		f.mu.Unlock()
		for _, r := range idle {
			f.release(context.Background(), r.l)
		}
	}
}
