package guardtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// linRunner executes a plan.
type linRunner struct {
	s         Subject
	ow        OutcomeWriter
	dw        DuplicateWriter
	cw        ClaimWriter
	cfg       Config
	plan      [][]plannedWrite
	resources []string
	slots     map[string]*atomic.Bool // a faulted write in flight (or its copy held) per resource
	rng       *rand.Rand              // used before the goroutines start only

	clock  atomic.Int64
	post   postman
	rounds barrier

	mu            sync.Mutex
	deliveryReads []observation // a read right after each delivery
}

func (r *linRunner) run(ctx context.Context) (linearHistory, error) {
	start := make(chan struct{})
	writersDone := make(chan struct{})
	total := 0
	for _, p := range r.plan {
		total += len(p)
	}
	out := make([][]*linearWrite, len(r.plan))
	reads := make([][]observation, len(r.plan)+max(r.cfg.Readers, 0))
	seeds := make([]uint64, len(r.plan))
	for i := range seeds {
		seeds[i] = r.rng.Uint64()
	}
	r.rounds.init(len(r.plan), r.cfg.FaultRounds)
	var writers, readers sync.WaitGroup
	for w := range r.plan {
		writers.Add(1)
		go func() {
			defer writers.Done()
			rng := rand.New(rand.NewPCG(seeds[w], uint64(w)))
			<-start
			next := 0 // the next round this writer arrives at
			defer func() { r.rounds.leave(next) }()
			for i, p := range r.plan[w] {
				for ; next <= p.Round; next++ {
					r.rounds.arrive(ctx, next)
				}
				if ctx.Err() != nil {
					return
				}
				lw := &linearWrite{Writer: w, Seq: i, Resource: p.Resource, Claim: p.Claim, Value: p.Value}
				r.write(ctx, rng, p, lw)
				out[w] = append(out[w], lw)
				r.post.tick()
				if p.ReadBack {
					reads[w] = append(reads[w], r.read(ctx, w, p.Resource))
				}
			}
		}()
	}
	for rd := 0; rd < r.cfg.Readers; rd++ {
		readers.Add(1)
		go func() {
			defer readers.Done()
			<-start
			for i := 0; i < total; i++ {
				select {
				case <-writersDone:
					return
				default:
				}
				if ctx.Err() != nil {
					return
				}
				reads[len(r.plan)+rd] = append(reads[len(r.plan)+rd], r.read(ctx, len(r.plan)+rd, r.resources[(i+rd)%len(r.resources)]))
			}
		}()
	}
	close(start)
	writers.Wait()
	close(writersDone)
	r.post.flush()
	readers.Wait()
	r.post.wg.Wait()
	if err := ctx.Err(); err != nil {
		return linearHistory{}, fmt.Errorf("linearizability run did not finish: %w", err)
	}
	var h linearHistory
	for _, ws := range out {
		for _, w := range ws {
			h.Writes = append(h.Writes, *w)
		}
	}
	for _, os := range reads {
		h.Reads = append(h.Reads, os...)
	}
	h.Reads = append(h.Reads, r.deliveryReads...)
	final := len(reads)
	for _, res := range r.resources {
		h.Reads = append(h.Reads, r.read(ctx, final, res))
	}
	return h, nil
}

func (r *linRunner) read(ctx context.Context, client int, res string) observation {
	o := observation{Reader: client, Resource: res}
	o.Invoked = r.clock.Add(1)
	v, tok, ok, err := r.s.Read(ctx, res)
	o.Completed = r.clock.Add(1)
	o.Err = err
	if ok && err == nil {
		o.State = found(v, tok)
	}
	return o
}

// errHeldCause ends a held write's context once its subject reports the
// commit applied.
var errHeldCause = errors.New("guardtest: the check ends a held write's context after its commit was applied")

func (r *linRunner) write(ctx context.Context, rng *rand.Rand, p plannedWrite, lw *linearWrite) {
	slot := r.slots[p.Resource]
	fault := p.Fault
	// One faulted write in flight per resource: subjects hold one request
	// per resource at a time. A write that finds the slot taken goes plain.
	if fault != faultNone && !slot.CompareAndSwap(false, true) {
		fault = faultNone
	}
	lw.Fault = fault
	switch fault {
	case faultHeld:
		defer slot.Store(false)
		hctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		tctx, tcancel := context.WithTimeout(hctx, delayedWriteTimeout)
		defer tcancel()
		var applied atomic.Bool
		lw.Invoked = r.clock.Add(1)
		lw.Err = r.ow.WriteHeld(fence.WithClaim(tctx, p.Claim), p.Resource, p.Claim.Token, p.Value, func() {
			applied.Store(true)
			cancel(errHeldCause)
		})
		lw.Completed = r.clock.Add(1)
		lw.Applied = applied.Load()
		if !lw.Applied && writeOutcome(lw.Err) == outcomeOK {
			lw.Violation = "WriteHeld returned nil without reporting its commit applied: the subject's hold never caught the committing request's reply"
		}
	case faultDelayed:
		dctx, cancel := context.WithTimeout(ctx, delayedWriteTimeout)
		lw.Invoked = r.clock.Add(1)
		deliver, err := r.dw.WriteDelayed(dctx, p.Resource, p.Claim, p.Value)
		lw.Completed = r.clock.Add(1)
		cancel()
		lw.Err = err
		if deliver == nil {
			slot.Store(false)
			lw.Violation = fmt.Sprintf("WriteDelayed returned no deliver function (error %s)", errText(err))
			lw.Delivered = lw.Completed
			return
		}
		// Delivered after a random number of other writes, or after
		// DeliveryDelay when the writers stall (a store that serialises
		// writes behind the held copy).
		r.post.send(ctx, 1+rng.IntN(len(r.plan)), r.cfg.DeliveryDelay, func(ctx context.Context) {
			defer slot.Store(false)
			if err := deliver(ctx); err != nil {
				switch writeOutcome(lw.Err) {
				case outcomeStale, outcomeReused, outcomeBusy:
					if errors.Is(err, ErrNothingHeld) {
						break // refused before any committing request left
					}
					fallthrough
				default:
					lw.Violation = fmt.Sprintf("delivering the held copy: %v", err)
				}
			}
			lw.Delivered = r.clock.Add(1)
			// Read at once: a copy applied on delivery shows before the
			// next write to the resource hides it.
			o := r.read(ctx, lw.Writer, p.Resource)
			r.mu.Lock()
			r.deliveryReads = append(r.deliveryReads, o)
			r.mu.Unlock()
		})
	default:
		lw.Invoked = r.clock.Add(1)
		if r.cw != nil {
			lw.Err = r.cw.WriteClaim(ctx, p.Resource, p.Claim, p.Value)
		} else {
			lw.Err = r.s.Write(ctx, p.Resource, p.Claim.Token, p.Value)
		}
		lw.Completed = r.clock.Add(1)
	}
}

// postman delivers held copies once a number of further writes completed,
// or after a delay, whichever comes first.
type postman struct {
	mu      sync.Mutex
	done    int
	waiting []parcel
	wg      sync.WaitGroup
}

type parcel struct {
	due   int
	ready chan struct{}
}

// send schedules deliver after n more completed writes or after delay.
func (p *postman) send(ctx context.Context, n int, delay time.Duration, deliver func(context.Context)) {
	ready := make(chan struct{})
	p.mu.Lock()
	p.waiting = append(p.waiting, parcel{due: p.done + n, ready: ready})
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-ready:
		case <-t.C:
		case <-ctx.Done():
		}
		deliver(ctx)
	}()
	p.release()
}

// tick counts a completed write and releases the parcels due.
func (p *postman) tick() {
	p.mu.Lock()
	p.done++
	p.mu.Unlock()
	p.release()
}

func (p *postman) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	kept := p.waiting[:0]
	for _, pc := range p.waiting {
		if pc.due <= p.done {
			close(pc.ready)
		} else {
			kept = append(kept, pc)
		}
	}
	p.waiting = kept
}

// flush releases every parcel: the writers are done.
func (p *postman) flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pc := range p.waiting {
		close(pc.ready)
	}
	p.waiting = nil
}

// barrier starts each round's writes together, so that a slow writer
// drifts at most a round behind: tokens race within a round instead of one
// writer's finishing before another starts (in-process subjects).
type barrier struct {
	mu      sync.Mutex
	n       int
	arrived []int
	open    []chan struct{}
}

func (b *barrier) init(n, rounds int) {
	b.n = n
	b.arrived = make([]int, rounds)
	b.open = make([]chan struct{}, rounds)
	for i := range b.open {
		b.open[i] = make(chan struct{})
	}
}

// arrive waits until every writer has reached round j, or ctx ends.
func (b *barrier) arrive(ctx context.Context, j int) {
	if j >= len(b.open) {
		return
	}
	b.count(j)
	select {
	case <-b.open[j]:
	case <-ctx.Done():
	}
}

// leave counts a finished writer as arrived at every round from j on.
func (b *barrier) leave(j int) {
	for ; j < len(b.open); j++ {
		b.count(j)
	}
}

func (b *barrier) count(j int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.arrived[j]++
	if b.arrived[j] == b.n {
		close(b.open[j])
	}
}
