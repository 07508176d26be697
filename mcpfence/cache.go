package mcpfence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease"
)

// cachedRun is a run's entry in the run cache (Config.RunCache): this
// Fence served a call of the run and parked it, and later calls of the run
// here run at once under its claim, with no lease statement, while the
// entry is trusted. Two goroutines keep it: watchRun (the key's
// lease.Watcher: drops the entry when the run no longer holds the key)
// and runClock (pushes the parked expiry forward after calls, and drops
// the entry once its trust deadline passed).
type cachedRun struct {
	key    lease.Key
	id     uuid.UUID
	claim  fence.Claim // the run's lease's claim (token, run, the key's scope): its calls' handler ctx carries it
	holder string

	ended context.Context // cancelled, with the cause, when the entry is invalidated: its calls' ctx end
	end   context.CancelCauseFunc
	stop  context.Context // done when the entry is dropped or the Fence closes: its goroutines stop
	halt  context.CancelFunc
	kick  chan struct{} // 1 slot: the clock recomputes its next wake-up

	// guarded by Fence.mu
	trustUntil time.Time // sent_at of the last park + RunIdle − RunIdle/5 (monotonic)
	lastPark   time.Time // sent_at of the last park (or the last extension attempt)
	dirty      bool      // calls ran (or run) since the last park
	calls      int       // cached calls running
	dropped    bool      // no longer in Fence.cache
}

// runTrust is how long after a park's sent_at its entry is trusted:
// RunIdle − RunIdle/5, the parked expiry less a margin, as a lease is
// trusted for TTL − SafetyMargin after its grant's sent_at (the lease
// package's default SafetyMargin is TTL/5). The park's expiry is set on
// the database clock after sent_at, so the margin absorbs clock-rate
// differences and scheduling delay only.
func (f *Fence) runTrust() time.Duration { return f.cfg.RunIdle - f.cfg.RunIdle/5 }

// runExtendEvery is the least time between two extensions of a cached
// run's parked expiry (RunIdle/10): a run ends between RunIdle and about
// 1.1×RunIdle after its last call.
func (f *Fence) runExtendEvery() time.Duration { return f.cfg.RunIdle / 10 }

// errWatchEnded is the cause of an entry whose watcher ended.
var errWatchEnded = errors.New("mcpfence: the run cache's watch of the conversation ended")

// useCached returns the trusted cache entry of run id on key, counting one
// more call of it; nil when the call must take the Resume path.
func (f *Fence) useCached(key lease.Key, id uuid.UUID, holder string) *cachedRun {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.cache[key]
	if e == nil || e.id != id || e.dropped || f.closed || !time.Now().Before(e.trustUntil) || (holder != "" && holder != e.holder) {
		// A new holder label takes the Resume path, which relabels the
		// run's row.
		return nil
	}
	e.calls++
	e.markDirty()
	return e
}

// leaveCached ends one cached call of e.
func (f *Fence) leaveCached(e *cachedRun) {
	f.mu.Lock()
	e.calls--
	e.markDirty()
	f.mu.Unlock()
}

// markDirty notes a call since the last park, waking the clock when it
// was waiting for the trust deadline only. The caller holds Fence.mu.
func (e *cachedRun) markDirty() {
	if e.dirty {
		return
	}
	e.dirty = true
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// cacheRun records that l was parked by a statement sent at sentAt: it
// creates the run's entry (and its watcher and clock), or refreshes it.
func (f *Fence) cacheRun(l *lease.Lease, sentAt time.Time) {
	key, id := l.Key(), l.RunID()
	trust := sentAt.Add(f.runTrust())
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	if e := f.cache[key]; e != nil {
		if e.id == id && !e.dropped {
			if trust.After(e.trustUntil) {
				e.trustUntil = trust
			}
			if sentAt.After(e.lastPark) {
				e.lastPark = sentAt
			}
			e.dirty = e.calls > 0
			select {
			case e.kick <- struct{}{}:
			default:
			}
			return
		}
		// Another run's entry: it no longer holds the key.
		f.dropLocked(e, fmt.Errorf("%w: %s run %s: run %s holds the conversation now", lease.ErrLost, key, e.id, id))
	}
	claim, _ := fence.ClaimFromContext(l.Context())
	e := &cachedRun{key: key, id: id, claim: claim, holder: l.Holder(), kick: make(chan struct{}, 1),
		trustUntil: trust, lastPark: sentAt}
	e.ended, e.end = context.WithCancelCause(context.Background())
	e.stop, e.halt = context.WithCancel(context.Background())
	f.cache[key] = e
	f.cacheWG.Add(2)
	go f.watchRun(e)
	go f.runClock(e)
}

// dropCached drops key's entry when it is run id's (any run's when id is
// uuid.Nil), ending its calls' ctx with cause.
func (f *Fence) dropCached(key lease.Key, id uuid.UUID, cause error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e := f.cache[key]; e != nil && (id == uuid.Nil || e.id == id) {
		f.dropLocked(e, cause)
	}
}

// dropOthers drops key's entry unless it is run id's: this Fence obtained
// the key for run id. cause builds the entry's end cause, only when there
// is an entry to drop (a per-call grant seldom finds one).
func (f *Fence) dropOthers(key lease.Key, id uuid.UUID, cause func() error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e := f.cache[key]; e != nil && e.id != id {
		f.dropLocked(e, cause())
	}
}

// drop drops e (when it still is in the cache) with cause.
func (f *Fence) drop(e *cachedRun, cause error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dropLocked(e, cause)
}

// dropLocked removes e from the cache, ends its calls' ctx with cause and
// stops its goroutines. The caller holds Fence.mu.
func (f *Fence) dropLocked(e *cachedRun, cause error) {
	if e.dropped {
		return
	}
	e.dropped = true
	if f.cache[e.key] == e {
		delete(f.cache, e.key)
	}
	e.end(cause)
	e.halt()
}

// closeCache stops every entry's goroutines (Close): the calls in flight
// keep their claim; an entry with calls since its last park extends the
// run once more before its clock stops. It waits for them.
func (f *Fence) closeCache() {
	f.mu.Lock()
	for _, e := range f.cache {
		e.halt()
	}
	f.mu.Unlock()
	f.cacheWG.Wait()
	f.mu.Lock()
	for k, e := range f.cache {
		e.dropped = true
		delete(f.cache, k)
	}
	f.mu.Unlock()
}

// watchRun drops e on any event that says its run no longer holds the key,
// and when the watcher fails.
func (f *Fence) watchRun(e *cachedRun) {
	defer f.cacheWG.Done()
	w, err := f.cfg.Manager.Watch(e.stop, e.key)
	if err != nil {
		if e.stop.Err() == nil {
			f.drop(e, fmt.Errorf("%w: %w", errWatchEnded, err))
		}
		return
	}
	defer w.Close()
	for {
		ev, err := w.Next(e.stop)
		if err != nil {
			if e.stop.Err() == nil {
				f.drop(e, fmt.Errorf("%w: %w", errWatchEnded, err))
			}
			return
		}
		if cause := e.invalidatedBy(ev); cause != nil {
			f.drop(e, cause)
			return
		}
	}
}

// invalidatedBy is the cause ev gives to drop e; nil when e's run still
// holds the key (its own renewals, parks and resumes).
func (e *cachedRun) invalidatedBy(ev lease.WatchEvent) error {
	switch {
	case ev.Kind == lease.WatchTakenOver && ev.Displaced == e.id,
		ev.Kind == lease.WatchTakenOver && ev.RunID != e.id:
		return fmt.Errorf("%w: %s run %s was taken over by another run (%w)", lease.ErrLost, e.key, e.id, lease.ErrTakenOver)
	case ev.RunID == e.id && ev.State == lease.StateReleased:
		return fmt.Errorf("%w: %s run %s was released (run_end) (%w)", lease.ErrLost, e.key, e.id, lease.ErrReleased)
	case ev.RunID != e.id:
		return fmt.Errorf("%w: %s run %s no longer holds the conversation: %s, run %s", lease.ErrLost, e.key, e.id, ev.Kind, ev.RunID)
	case ev.Kind == lease.WatchReleased || ev.Kind == lease.WatchExpired || ev.Kind == lease.WatchGranted || !ev.Held():
		return fmt.Errorf("%w: %s run %s: %s (%s)", lease.ErrLost, e.key, e.id, ev.Kind, ev.State)
	}
	return nil
}

// runClock extends e's parked expiry (Resume, then Park) at most once per
// runExtendEvery when calls ran since the last park, and drops e when its
// trust deadline passes. When the Fence closes it extends once more if
// calls ran since the last park.
func (f *Fence) runClock(e *cachedRun) {
	defer f.cacheWG.Done()
	every := f.runExtendEvery()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		f.mu.Lock()
		wake := e.trustUntil
		if next := e.lastPark.Add(every); e.dirty && next.Before(wake) {
			wake = next
		}
		f.mu.Unlock()
		t.Reset(time.Until(wake))
		select {
		case <-e.stop.Done():
			f.mu.Lock()
			final := !e.dropped && (e.dirty || e.calls > 0)
			f.mu.Unlock()
			if final {
				f.extend(e)
			}
			return
		case <-e.kick:
			continue
		case <-t.C:
		}
		now := time.Now()
		f.mu.Lock()
		expired := !now.Before(e.trustUntil)
		due := e.dirty && !now.Before(e.lastPark.Add(every))
		if due && !expired {
			e.dirty = false
		}
		f.mu.Unlock()
		switch {
		case expired:
			f.drop(e, fmt.Errorf("mcpfence: %s run %s: the run cache's trust deadline passed without an extension (%w)", e.key, e.id, lease.ErrTrustExpired))
			return
		case due:
			f.extend(e)
		}
	}
}

// extend resumes e's run and parks it again for RunIdle, on a context
// bounded by ReleaseTimeout, and refreshes e's trust deadline from the
// park's sent_at. A run active elsewhere (lease.ErrRunActive) is left to
// the call running it, which parks it itself.
func (f *Fence) extend(e *cachedRun) {
	ctx, cancel := context.WithTimeout(context.Background(), f.cfg.ReleaseTimeout)
	defer cancel()
	failed := func(err error) {
		f.mu.Lock()
		e.dirty, e.lastPark = true, time.Now()
		f.mu.Unlock()
		f.cfg.Logger.Warn("mcpfence: extending a cached run failed (retried)", "key", e.key.String(), "run_id", e.id, "err", err)
	}
	l, err := f.cfg.Manager.Resume(ctx, e.key, e.id)
	switch {
	case errors.Is(err, lease.ErrRunActive):
		f.mu.Lock()
		e.dirty = e.dirty || e.calls > 0
		if e.dirty {
			e.lastPark = time.Now()
		}
		f.mu.Unlock()
		return
	case errors.Is(err, lease.ErrLost):
		f.drop(e, err)
		return
	case err != nil:
		failed(err)
		return
	}
	sentAt := time.Now()
	if err := l.Park(ctx, f.cfg.RunIdle); err != nil {
		if errors.Is(err, lease.ErrLost) {
			f.drop(e, err)
			return
		}
		failed(err)
		return
	}
	f.mu.Lock()
	e.trustUntil = sentAt.Add(f.runTrust())
	e.lastPark = sentAt
	e.dirty = e.dirty || e.calls > 0
	f.mu.Unlock()
}
