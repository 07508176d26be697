package mcpfence

import (
	"context"
	"slices"

	"github.com/fencekit/fencekit/lease"
)

// releaseCall releases a per-call lease when its tool returned: in the
// background (the call's result does not wait for the release's commit;
// awaitReleases orders this Fence's next obtain of the key after it), or
// before returning with Config.ReleaseBeforeReply or once Close began.
func (f *Fence) releaseCall(ctx context.Context, l *lease.Lease) {
	key := l.Key()
	done := make(chan struct{})
	f.mu.Lock()
	if f.cfg.ReleaseBeforeReply || f.closed {
		f.mu.Unlock()
		f.release(ctx, l)
		return
	}
	f.releasing[key] = append(f.releasing[key], done)
	f.bg.Add(1)
	f.mu.Unlock()
	go func() {
		defer f.bg.Done()
		f.release(ctx, l)
		f.mu.Lock()
		rest := slices.DeleteFunc(f.releasing[key], func(c chan struct{}) bool { return c == done })
		if len(rest) == 0 {
			delete(f.releasing, key)
		} else {
			f.releasing[key] = rest
		}
		f.mu.Unlock()
		close(done)
	}()
}

// awaitReleases waits for this Fence's per-call releases of key in flight.
func (f *Fence) awaitReleases(ctx context.Context, key lease.Key) error {
	f.mu.Lock()
	pending := slices.Clone(f.releasing[key])
	f.mu.Unlock()
	for _, c := range pending {
		select {
		case <-c:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}

// release releases l on a context of its own: ctx's values (its span) but
// not its cancellation, bounded by ReleaseTimeout.
func (f *Fence) release(ctx context.Context, l *lease.Lease) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.cfg.ReleaseTimeout)
	defer cancel()
	if _, err := l.Release(ctx); err != nil {
		f.cfg.Logger.Warn("mcpfence: release failed (the Manager retries it)", "key", l.Key().String(), "run_id", l.RunID(), "err", err)
	}
}
