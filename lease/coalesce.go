package lease

import (
	"context"
	"slices"
	"sync"
)

// Statement sharing (docs/lease.md, "Concurrent grants and releases share
// a statement"). A request is sent at once, in a statement of its own,
// while fewer than coalesceSlots statements of its kind are in flight for
// the Manager. Otherwise it queues, and when a slot frees the queued
// requests go together in one statement, which decides each row exactly as
// the lone statement would. One caller never waits for a timer: a request
// waits only for a statement already in flight.
const (
	// coalesceSlots is how many statements of one kind (grants, releases)
	// a Manager keeps in flight at once. More would let each carry fewer
	// requests: on a two-core server, two in flight already keep it busy
	// while batching.
	coalesceSlots = 2
	// maxCoalesce bounds the keys of one shared statement.
	maxCoalesce = 64
)

// coalescer queues the requests of one kind that found every slot taken.
// Q is a request, R its outcome.
type coalescer[Q any, R any] struct {
	// key and group say which requests may share a statement: distinct
	// keys, one group (the epoch).
	key   func(Q) Key
	group func(Q) *epoch
	// one sends q alone under the caller's ctx; many sends qs together
	// under ctx, which has the first caller's values and no caller's
	// cancellation, and returns their outcomes in order.
	one  func(ctx context.Context, q Q) R
	many func(ctx context.Context, qs []Q) []R
	// left is called, outside the lock, with the outcome of a request whose
	// caller's ctx ended while its shared statement was in flight.
	left func(ctx context.Context, q Q, r R)

	mu      sync.Mutex
	idle    sync.Cond       // on mu: broadcast when a batch goroutine ends
	flight  int             // statements in flight (at most coalesceSlots)
	batches int             // goroutines sending shared statements
	queue   []*queued[Q, R] // waiting, in arrival order
	closed  bool            // Close ran: requests no longer queue
	shared  int64           // requests sent in a statement with others (tests)
}

// queued is one queued request and, once its statement returned, its
// outcome.
type queued[Q any, R any] struct {
	ctx   context.Context // the caller's: its values go with a statement it leads
	q     Q
	state queueState    // under coalescer.mu
	done  chan struct{} // closed when res is set
	res   R
}

type queueState uint8

const (
	queuedWaiting queueState = iota
	queuedSent               // in a shared statement in flight
	queuedDone               // res is set
	queuedLeft               // the caller's ctx ended while it was sent; left handles res
)

// do sends or queues q and returns its outcome. sent is false when ctx
// ended while q was queued: nothing of it reached the database. left is true when ctx ended while q was in a shared
// statement: the coalescer's left then has its outcome, and the caller
// must not act on it.
func (c *coalescer[Q, R]) do(ctx context.Context, q Q) (res R, sent, left bool) {
	c.mu.Lock()
	if c.closed { // alone, as before the Manager coalesced anything
		c.mu.Unlock()
		return c.one(ctx, q), true, false
	}
	if c.flight < coalesceSlots && len(c.queue) == 0 {
		c.flight++
		c.mu.Unlock()
		res = c.one(ctx, q)
		c.slotFree()
		return res, true, false
	}
	w := &queued[Q, R]{ctx: ctx, q: q, done: make(chan struct{})}
	c.queue = append(c.queue, w)
	c.mu.Unlock()
	select {
	case <-w.done:
		return w.res, true, false
	case <-ctx.Done():
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch w.state {
	case queuedWaiting:
		c.queue = slices.DeleteFunc(c.queue, func(x *queued[Q, R]) bool { return x == w })
		return res, false, false
	case queuedSent:
		w.state = queuedLeft
		return res, true, true
	default: // the outcome arrived as ctx ended
		return w.res, true, false
	}
}

// slotFree ends a statement: its slot goes to the queue's next batch, in a
// goroutine of its own, or is freed.
func (c *coalescer[Q, R]) slotFree() {
	c.mu.Lock()
	defer c.mu.Unlock()
	batch := c.takeLocked()
	if batch == nil {
		c.flight--
		return
	}
	c.batches++
	go c.send(batch)
}

// takeLocked takes the next batch off the queue, or returns nil when the
// queue is empty. A batch holds distinct keys of the first
// request's group; the others stay queued, in order, for the next.
func (c *coalescer[Q, R]) takeLocked() []*queued[Q, R] {
	if len(c.queue) == 0 {
		return nil
	}
	g := c.group(c.queue[0].q)
	batch := make([]*queued[Q, R], 0, min(len(c.queue), maxCoalesce))
	seen := make(map[Key]struct{}, cap(batch))
	rest := c.queue[:0]
	for _, w := range c.queue {
		k := c.key(w.q)
		if _, dup := seen[k]; dup || c.group(w.q) != g || len(batch) == maxCoalesce {
			rest = append(rest, w)
			continue
		}
		seen[k] = struct{}{}
		w.state = queuedSent
		batch = append(batch, w)
	}
	clear(c.queue[len(rest):])
	c.queue = rest
	if len(batch) > 1 {
		c.shared += int64(len(batch))
	}
	return batch
}

// send sends batch, hands each caller its outcome, and goes on with the
// next batch while there is one.
func (c *coalescer[Q, R]) send(batch []*queued[Q, R]) {
	for batch != nil {
		var results []R
		ctx := context.WithoutCancel(batch[0].ctx)
		if len(batch) == 1 {
			results = []R{c.one(ctx, batch[0].q)}
		} else {
			qs := make([]Q, len(batch))
			for i, w := range batch {
				qs[i] = w.q
			}
			results = c.many(ctx, qs)
		}
		c.mu.Lock()
		var gone []*queued[Q, R]
		for i, w := range batch {
			w.res = results[i]
			if w.state == queuedLeft {
				gone = append(gone, w)
				continue
			}
			w.state = queuedDone
			close(w.done)
		}
		next := c.takeLocked()
		if next == nil {
			c.flight--
			c.batches--
			c.idle.Broadcast()
		}
		c.mu.Unlock()
		for _, w := range gone {
			c.left(w.ctx, w.q, w.res)
		}
		batch = next
	}
}

// close makes later requests go alone and waits until the queued ones
// have been sent and every shared statement has returned (Close): no
// goroutine of the coalescer outlives it.
func (c *coalescer[Q, R]) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.idle.L == nil {
		c.idle.L = &c.mu
	}
	for len(c.queue) > 0 || c.batches > 0 {
		c.idle.Wait()
	}
}

// sharedCount is how many requests went in a statement with others.
func (c *coalescer[Q, R]) sharedCount() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.shared
}
