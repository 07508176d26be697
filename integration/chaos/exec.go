package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/fencekit/fencekit/integration/history"
)

// resource is one guarded resource of a lease key.
type resource struct {
	name string
	t    target
	drop func(context.Context) context.Context // arms a lost reply for one write; nil: not supported
}

// execution is one competitor: it repeatedly takes a lease on one of the
// keys and, while it trusts the lease, writes to that key's resources.
type execution struct {
	id        string
	rng       *rand.Rand
	rec       *history.Recorder
	leaser    Leaser
	keys      []Key
	resources map[Key][]resource
	ttl       time.Duration
	faults    FaultSet
	pgDrop    *commitDropper
	watchers  sync.WaitGroup
	op        int64
}

// Probabilities of the faults an execution injects itself, per write.
const (
	pPause     = 0.08
	pLostReply = 0.05
)

// run competes until ctx ends.
func (x *execution) run(ctx context.Context) {
	defer x.watchers.Wait()
	for ctx.Err() == nil {
		key := x.keys[x.rng.IntN(len(x.keys))]
		x.attempt(ctx, key)
		// Pacing between attempts, not synchronisation.
		sleepCtx(ctx, time.Duration(x.rng.IntN(int(x.ttl/4)+1)))
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func (x *execution) base(kind history.Kind, key Key) history.Event {
	return history.Event{Kind: kind, Exec: x.id, Key: key.String()}
}

func (x *execution) attempt(ctx context.Context, key Key) { //nolint:contextcheck // holds and writes under the lease context, by design
	actx, cancel := context.WithTimeout(ctx, 2*x.ttl)
	sent := history.Now()
	h, err := x.leaser.Acquire(actx, key)
	cancel()
	if err != nil {
		e := x.base(history.AcquireError, key)
		if errors.Is(err, ErrRefused) {
			e.Kind = history.AcquireRefused
		} else {
			e.Cause = err.Error()
		}
		e.Sent = sent
		x.rec.Record(e)
		return
	}
	g := x.base(history.AcquireGranted, key)
	g.Sent, g.Mono = sent, history.Now()
	g.Token, g.RunID = h.Token(), h.RunID()
	g.Deadline = history.MonoOf(h.TrustDeadline())
	x.rec.Record(g)

	lctx := h.Context()
	x.watchers.Add(1)
	go func() {
		defer x.watchers.Done()
		<-lctx.Done()
		e := x.base(history.Loss, key)
		e.Mono = history.Now()
		e.Token, e.RunID = h.Token(), h.RunID()
		e.Cause = causeOf(lctx)
		x.rec.Record(e)
	}()

	x.hold(ctx, key, h)
}

func causeOf(ctx context.Context) string {
	c := context.Cause(ctx)
	if c == nil {
		return "unknown"
	}
	return c.Error()
}

func (x *execution) hold(ctx context.Context, key Key, h Held) {
	steps := 1 + x.rng.IntN(8)
	lastRenew := time.Now()
	res := x.resources[key]
	for i := 0; i < steps && ctx.Err() == nil; i++ {
		if time.Since(lastRenew) > x.ttl/3 {
			x.renew(ctx, key, h)
			lastRenew = time.Now()
		}
		// The ownership check a careful user makes before each step: the
		// lease context, and the trust deadline itself (a frozen process
		// may wake before the lease's timer has cancelled the context).
		w := history.Now()
		dl := h.TrustDeadline()
		if h.Context().Err() != nil || !time.Now().Before(dl) {
			return // lost: stop working, nothing to release
		}
		we := x.base(history.Work, key)
		we.Mono, we.Token, we.RunID, we.Deadline = w, h.Token(), h.RunID(), history.MonoOf(dl)
		x.rec.Record(we)

		r := res[x.rng.IntN(len(res))]
		wctx, cancel := context.WithTimeout(h.Context(), 5*time.Second)
		if x.faults[FaultPause] && x.rng.Float64() < pPause {
			d := x.ttl*3/2 + time.Duration(x.rng.IntN(int(x.ttl*3/2)))
			x.fault(FaultPause, fmt.Sprintf("%s stalls %s before writing %s", x.id, d.Round(time.Millisecond), r.name))
			// The execution's own database traffic stalls too, so its
			// lease cannot renew itself in the background meanwhile.
			if x.pgDrop != nil {
				x.pgDrop.hold()
			}
			sleepCtx(ctx, d) // the injected pause itself
			if x.pgDrop != nil {
				x.pgDrop.resume()
			}
			// The write was already in flight: it is not cancelled with the
			// lease, the guard alone must stop it.
			cancel()
			wctx, cancel = context.WithTimeout(context.WithoutCancel(h.Context()), 5*time.Second)
		}
		if x.faults[FaultLostReply] && x.rng.Float64() < pLostReply {
			switch {
			case r.t.kind() == GuardPG && x.pgDrop != nil:
				x.pgDrop.armed.Store(true)
				x.fault(FaultLostReply, "pg commit reply of "+r.name)
			case r.drop != nil:
				wctx = r.drop(wctx)
				x.fault(FaultLostReply, r.t.kind()+" reply of "+r.name)
			}
		}
		x.op++
		value := fmt.Sprintf("%s#%d", x.id, x.op)
		inv := history.Event{Kind: history.WriteInvoke, Exec: x.id, Key: key.String(), Resource: r.name, Guard: r.t.kind(),
			Token: h.Token(), RunID: h.RunID(), Op: x.op, Value: value}
		x.rec.Record(inv)
		outcome, err := r.t.write(wctx, r.name, h.Token(), value) //nolint:contextcheck // wctx derives from the lease's context on purpose
		cancel()
		if x.pgDrop != nil {
			x.pgDrop.armed.Store(false)
		}
		done := inv
		done.Kind, done.Mono, done.Seq, done.Outcome = history.WriteComplete, 0, 0, outcome
		if err != nil && outcome != history.Stale {
			done.Cause = err.Error()
		}
		x.rec.Record(done)
		sleepCtx(ctx, time.Duration(x.rng.IntN(int(x.ttl/6)+1))) // think time
	}
	if h.Context().Err() != nil {
		return
	}
	if _, ok := h.(interface{ abandon() }); ok && x.rng.IntN(5) == 0 {
		return // abandon: stop renewing and let it expire
	}
	rel := x.base(history.Release, key)
	rel.Token, rel.RunID = h.Token(), h.RunID()
	x.rec.Record(rel)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_ = h.Release(rctx) // a failed release expires (per-lease row) or is retried by the Manager (heartbeat row)
}

func (x *execution) renew(ctx context.Context, key Key, h Held) {
	rctx, cancel := context.WithTimeout(ctx, x.ttl/2)
	defer cancel()
	sent := history.Now()
	err := h.Renew(rctx)
	e := x.base(history.RenewOK, key)
	e.Sent, e.Mono = sent, history.Now()
	e.Token, e.RunID = h.Token(), h.RunID()
	switch {
	case err == nil:
		e.Deadline = history.MonoOf(h.TrustDeadline())
	case errors.Is(err, ErrRejected):
		e.Kind, e.Cause = history.RenewRejected, err.Error()
	default:
		e.Kind, e.Cause = history.RenewError, err.Error()
	}
	x.rec.Record(e)
}

func (x *execution) fault(f Fault, detail string) {
	x.rec.Record(history.Event{Kind: history.Fault, Exec: x.id, Cause: string(f), Value: detail})
}
