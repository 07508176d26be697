package mcpfence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fencekit/fencekit/lease"
)

// Backoff of a later call of a run while the run is active on another
// replica (lease.ErrRunActive): from resumeBackoffMin, doubling, at most
// resumeBackoffMax, for at most Config.MaxWait.
const (
	resumeBackoffMin = 5 * time.Millisecond
	resumeBackoffMax = 100 * time.Millisecond
)

// run is a run's lease while calls of it run in this Fence. A run lives in
// the database (a parked grant, lease.Lease.Park) between its calls: the
// entry exists only while at least one of its calls runs here, and the
// last one to return parks the lease, so that a later call on any replica
// resumes it (lease.Manager.Resume).
type run struct {
	id    uuid.UUID // the handle: the lease's run_id
	key   lease.Key
	start bool // this entry began the run (MetaRunStart)

	ready chan struct{} // closed once the lease was obtained or resumed (or that failed)
	l     *lease.Lease  // nil when that failed
	fail  *Refusal      // why it failed

	// guarded by Fence.mu
	calls  int  // calls running here
	ended  bool // released (MetaRunEnd, or its first call failed): never parked
	failed bool // the run's first call did not succeed: released, not parked
}

// startRun obtains a new run's lease by policy (the call presents
// MetaRunStart) and registers it, so that the call's result can name its
// handle.
func (f *Fence) startRun(ctx context.Context, policy Policy, req *mcp.CallToolRequest, key lease.Key) (*run, *Refusal) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, &Refusal{Cause: CauseUnavailable, Message: "the server is shutting down", Conversation: key.SessionID}
	}
	f.mu.Unlock()
	l, refusal := f.obtain(ctx, policy, req, key)
	if refusal != nil {
		return nil, refusal
	}
	r := &run{id: l.RunID(), key: key, start: true, ready: make(chan struct{}), l: l, calls: 1}
	close(r.ready)
	f.mu.Lock()
	f.runs[r.id] = r
	f.mu.Unlock()
	return r, nil
}

// joinRun continues the run id (a later call: MetaRun): it joins the calls
// of the run running here, or resumes the run's parked grant from the
// database, waiting while the run is active on another replica.
func (f *Fence) joinRun(ctx context.Context, req *mcp.CallToolRequest, key lease.Key, id uuid.UUID) (*run, *Refusal) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, &Refusal{Cause: CauseUnavailable, Message: "the server is shutting down", Conversation: key.SessionID}
	}
	r, ok := f.runs[id]
	if !ok {
		r = &run{id: id, key: key, ready: make(chan struct{}), calls: 1}
		f.runs[id] = r
		f.mu.Unlock()
		r.l, r.fail = f.resume(ctx, req, key, id)
		f.mu.Lock()
		if r.fail != nil {
			delete(f.runs, id)
			if e := f.cache[key]; e != nil && e.id == id && (r.fail.Cause == CauseRunEnded || r.fail.Cause == CauseTakenOver) {
				// The run's row says it ended: so has its cache entry.
				f.dropLocked(e, fmt.Errorf("%w: %s run %s: %s", lease.ErrLost, key, id, r.fail.Message))
			}
		}
		close(r.ready)
		f.mu.Unlock()
		if r.fail != nil {
			return nil, r.fail
		}
		return r, nil
	}
	if r.key != key {
		f.mu.Unlock()
		return nil, &Refusal{Cause: CauseRunEnded, Conversation: key.SessionID,
			Message: fmt.Sprintf("run %s does not hold this conversation: start a run of your own", id)}
	}
	r.calls++
	f.mu.Unlock()
	select {
	case <-r.ready:
	case <-ctx.Done():
		f.leaveRun(ctx, r, false, false)
		return nil, &Refusal{Cause: CauseCanceled, Message: fmt.Sprintf("the call ended while its run's lease was obtained: %v", context.Cause(ctx)), Conversation: key.SessionID}
	}
	if r.fail != nil {
		f.leaveRun(ctx, r, false, false)
		return nil, r.fail
	}
	f.mu.Lock()
	ended := r.ended
	f.mu.Unlock()
	if ended || r.l.Err() != nil {
		rf := Refusal{Conversation: key.SessionID, Token: r.l.Token()}
		if r.l.Err() != nil {
			rf = f.endedRefusal(ctx, context.Cause(r.l.Context()), key, rf) //nolint:contextcheck // the lease's cause, not a context to pass on
		} else {
			rf.Cause, rf.Message = CauseRunEnded, "the run has ended: start a new one"
		}
		f.leaveRun(ctx, r, false, false)
		return nil, &rf
	}
	return r, nil
}

// resume takes the run's parked grant into this Fence's Manager, retrying
// with backoff while the run is active elsewhere (lease.ErrRunActive), for
// at most MaxWait.
func (f *Fence) resume(ctx context.Context, req *mcp.CallToolRequest, key lease.Key, id uuid.UUID) (*lease.Lease, *Refusal) {
	var opts []lease.Option
	if h := f.cfg.Holder(ctx, req); h != "" {
		opts = append(opts, lease.WithHolder(h))
	}
	wctx, cancel := context.WithTimeout(ctx, f.cfg.MaxWait)
	defer cancel()
	delay := resumeBackoffMin
	for {
		l, err := f.cfg.Manager.Resume(wctx, key, id, opts...)
		if err == nil {
			return l, nil
		}
		held := func() *Refusal {
			return &Refusal{Cause: CauseHeld, Conversation: key.SessionID, Owner: f.owner(ctx, key),
				Message: fmt.Sprintf("run %s stayed active in another call (another replica) for %s", id, f.cfg.MaxWait)}
		}
		if !errors.Is(err, lease.ErrRunActive) {
			if wctx.Err() != nil && ctx.Err() == nil && !errors.Is(err, lease.ErrLost) {
				// MaxWait passed during a Resume statement, not the
				// call's own ctx: the same answer as during the backoff.
				return nil, held()
			}
			return nil, f.resumeRefusal(ctx, key, id, err)
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-wctx.Done():
			t.Stop()
			if ctx.Err() != nil {
				return nil, &Refusal{Cause: CauseCanceled, Message: fmt.Sprintf("the call ended while its run was active elsewhere: %v", context.Cause(ctx)), Conversation: key.SessionID}
			}
			return nil, held()
		}
		delay = min(2*delay, resumeBackoffMax)
	}
}

// resumeRefusal turns a failed Resume into a Refusal: a run that no longer
// holds the conversation (released, idle for RunIdle, revoked, or a handle
// of another conversation) has ended; one displaced by a takeover was taken
// over.
func (f *Fence) resumeRefusal(ctx context.Context, key lease.Key, id uuid.UUID, err error) *Refusal {
	switch {
	case errors.Is(err, lease.ErrTakenOver):
		return &Refusal{Cause: CauseTakenOver, Conversation: key.SessionID, Owner: f.owner(ctx, key),
			Message: fmt.Sprintf("another device took the conversation over (continue here): run %s has ended", id)}
	case errors.Is(err, lease.ErrLost):
		return &Refusal{Cause: CauseRunEnded, Conversation: key.SessionID,
			Message: fmt.Sprintf("run %s does not hold this conversation (it ended: run_end, idle for %s, or not this conversation's): start a new run", id, f.cfg.RunIdle)}
	}
	return f.leaseRefusal(ctx, key, err)
}

// leaveRun ends one call of r. end (MetaRunEnd) and failed (the first call
// of the run did not succeed) release the run's lease; otherwise the last
// call of r running here parks it for RunIdle, for a later call on any
// replica to resume.
func (f *Fence) leaveRun(ctx context.Context, r *run, end, failed bool) {
	f.mu.Lock()
	r.calls--
	release := (end || failed) && !r.ended
	if end || failed {
		r.ended = true
		r.failed = r.failed || failed
	}
	park := r.calls == 0 && !r.ended
	if r.calls == 0 && f.runs[r.id] == r {
		delete(f.runs, r.id)
	}
	f.mu.Unlock()
	if r.l == nil {
		return
	}
	switch {
	case release:
		// The calls of the run cached here end with the release.
		f.dropCached(r.key, r.id, fmt.Errorf("%s run %s: %w", r.key, r.id, lease.ErrReleased))
		f.release(ctx, r.l)
	case park && r.l.Err() == nil:
		if sentAt, ok := f.park(ctx, r.l); ok && f.cfg.RunCache {
			f.cacheRun(r.l, sentAt) //nolint:contextcheck // the entry outlives the call: its goroutines use contexts of their own
		}
	}
}

// park parks l for RunIdle on a context of its own (ctx's values, not its
// cancellation), bounded by ReleaseTimeout. It returns the local time just
// before the statement was sent, and whether the park succeeded.
func (f *Fence) park(ctx context.Context, l *lease.Lease) (time.Time, bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.cfg.ReleaseTimeout)
	defer cancel()
	sentAt := time.Now()
	if err := l.Park(ctx, f.cfg.RunIdle); err != nil {
		f.cfg.Logger.Warn("mcpfence: parking a run failed (its grant expires unless resumed)", "key", l.Key().String(), "run_id", l.RunID(), "err", err)
		return sentAt, false
	}
	return sentAt, true
}
