package mcpfence

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fencekit/fencekit/lease"
)

// obtain gets key's lease according to policy. Acquire and Wait first
// wait for this Fence's releases of key in flight, which would otherwise
// refuse them.
func (f *Fence) obtain(ctx context.Context, policy Policy, req *mcp.CallToolRequest, key lease.Key) (*lease.Lease, *Refusal) {
	if policy != ContinueHere {
		if err := f.awaitReleases(ctx, key); err != nil {
			return nil, &Refusal{Cause: CauseCanceled, Message: err.Error(), Conversation: key.SessionID}
		}
	}
	opts := []lease.Option{}
	if h := f.cfg.Holder(ctx, req); h != "" {
		opts = append(opts, lease.WithHolder(h))
	}
	var (
		l   *lease.Lease
		err error
	)
	switch policy {
	case ContinueHere:
		l, err = f.cfg.Manager.Takeover(ctx, key, opts...)
	case Wait:
		l, err = f.wait(ctx, req, key, opts)
	default:
		l, err = f.cfg.Manager.Acquire(ctx, key, opts...)
	}
	if err == nil {
		// This Fence's cached run of key (another run) no longer holds it.
		f.dropOthers(key, l.RunID(), func() error {
			if policy == ContinueHere {
				return fmt.Errorf("%w: %s was taken over by run %s (%w)", lease.ErrLost, key, l.RunID(), lease.ErrTakenOver)
			}
			return fmt.Errorf("%w: %s: run %s holds the conversation now", lease.ErrLost, key, l.RunID())
		})
		return l, nil
	}
	return nil, f.leaseRefusal(ctx, key, err)
}

// wait is the Wait policy: one Acquire, then (when held) AcquireWait for at
// most MaxWait with progress notifications naming the holder.
func (f *Fence) wait(ctx context.Context, req *mcp.CallToolRequest, key lease.Key, opts []lease.Option) (*lease.Lease, error) {
	l, err := f.cfg.Manager.Acquire(ctx, key, opts...)
	var held *lease.HeldError
	if !errors.As(err, &held) {
		return l, err
	}
	token := req.Params.GetProgressToken()
	wctx, cancel := context.WithTimeout(ctx, f.cfg.MaxWait)
	defer cancel()
	if token != nil && req.Session != nil {
		start := time.Now()
		holder, token0 := held.Holder, held.Token // the notifier's own copies: held is reused below
		notify := func(n int) {
			msg := fmt.Sprintf("waiting for the conversation: held by %s with token %d (%s so far)",
				ownerName(holder), token0, time.Since(start).Round(time.Millisecond))
			_ = req.Session.NotifyProgress(wctx, &mcp.ProgressNotificationParams{ProgressToken: token, Message: msg, Progress: float64(n)})
		}
		notify(0)
		stopped := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(f.cfg.ProgressEvery)
			defer t.Stop()
			for n := 1; ; n++ {
				select {
				case <-t.C:
					notify(n)
				case <-stopped:
					return
				}
			}
		}()
		defer func() { close(stopped); wg.Wait() }()
	}
	l, err = f.cfg.Manager.AcquireWait(wctx, key, opts...)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		// Waited MaxWait: report the holder the last attempt saw.
		var last *lease.HeldError
		if errors.As(err, &last) {
			return nil, last
		}
	}
	return l, err
}

// leaseRefusal turns a lease error into a Refusal.
func (f *Fence) leaseRefusal(ctx context.Context, key lease.Key, err error) *Refusal {
	r := &Refusal{Conversation: key.SessionID, Message: err.Error()}
	var held *lease.HeldError
	switch {
	case errors.As(err, &held):
		r.Cause = CauseHeld
		r.Owner = &Owner{Holder: held.Holder, Token: held.Token, RunID: held.RunID.String(), Held: true}
		if held.Token == 0 {
			r.Owner = nil
		}
	case errors.Is(err, lease.ErrUnauthorized):
		r.Cause = CauseUnauthorized
	case errors.Is(err, lease.ErrInvalidKey), errors.Is(err, lease.ErrInvalidHolder):
		r.Cause = CauseInvalidMeta
	case ctx.Err() != nil:
		r.Cause = CauseCanceled
	default:
		r.Cause = CauseUnavailable
	}
	return r
}
