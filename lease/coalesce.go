package lease

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Statement sharing (docs/lease.md, "Concurrent grants and releases share
// a statement"). A request is sent at once, in a statement of its own,
// when no statement of its kind is in flight for the Manager. Otherwise it
// queues, and when the statement in flight returns, the queued requests go
// together in the next one, which decides each row exactly as the lone
// statement would. One caller never waits for a timer: a request waits
// only for a statement already in flight. A statement in flight longer
// than coalesceStall no longer holds the others back: the queue gets a
// second slot (up to coalesceSlots), so one stalled statement (a lock
// wait, a lost reply) delays only its own requests.
const (
	// coalesceSlots is how many statements of one kind (grants, releases)
	// a Manager keeps in flight at the most: one, and one more for each
	// that has stalled.
	coalesceSlots = 2
	// coalesceStall is how long a statement is in flight before the
	// queue no longer waits for it: far above a statement's round trip
	// (well under a millisecond on one host, a few across zones or
	// through a pooler), far below CallTimeout.
	coalesceStall = 10 * time.Millisecond
	// maxCoalesce bounds the keys of one shared statement.
	maxCoalesce = 64
)

// coalescer queues the requests of one kind that found a statement of
// their kind in flight. Q is a request, R its outcome.
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
	idle    sync.Cond                // on mu: broadcast when a batch goroutine ends
	slots   [coalesceSlots]time.Time // when each slot's statement was sent; zero: free
	stall   *time.Timer              // fires when the statements in flight will have stalled
	armed   bool                     // stall is set to fire
	batches int                      // goroutines sending shared statements
	queue   []*queued[Q, R]          // waiting, in arrival order
	closed  bool                     // Close ran: requests no longer queue
	shared  int64                    // requests sent in a statement with others (tests)
	stalls  int64                    // slots opened because the statements in flight stalled (tests)
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
	if len(c.queue) == 0 {
		if i, ok := c.slotLocked(time.Now()); ok {
			c.mu.Unlock()
			res = c.one(ctx, q)
			c.slotFree(i)
			return res, true, false
		}
	}
	w := &queued[Q, R]{ctx: ctx, q: q, done: make(chan struct{})}
	c.queue = append(c.queue, w)
	c.armLocked(time.Now())
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

// slotLocked takes a free slot for a statement sent at now: when no
// statement of this kind is in flight, or when every one in flight was
// sent coalesceStall or more before now.
func (c *coalescer[Q, R]) slotLocked(now time.Time) (int, bool) {
	free := -1
	for i, sent := range c.slots {
		switch {
		case sent.IsZero():
			if free < 0 {
				free = i
			}
		case now.Sub(sent) < coalesceStall:
			return 0, false
		}
	}
	if free < 0 {
		return 0, false
	}
	if c.busyLocked() { // every statement in flight has stalled
		c.stalls++
	}
	c.slots[free] = now
	return free, true
}

// busyLocked reports whether a statement of this kind is in flight.
func (c *coalescer[Q, R]) busyLocked() bool {
	return slices.ContainsFunc(c.slots[:], func(t time.Time) bool { return !t.IsZero() })
}

// armLocked sets the stall timer, when requests queue behind statements in
// flight while a slot is free, to fire when the youngest of them will
// have been in flight coalesceStall.
func (c *coalescer[Q, R]) armLocked(now time.Time) {
	if c.armed || len(c.queue) == 0 {
		return
	}
	var youngest time.Time
	free := false
	for _, sent := range c.slots {
		if sent.IsZero() {
			free = true
		} else if sent.After(youngest) {
			youngest = sent
		}
	}
	if !free || youngest.IsZero() {
		return // a slot's end takes the queue
	}
	wait := youngest.Add(coalesceStall).Sub(now)
	if c.stall == nil {
		c.stall = time.AfterFunc(wait, c.stalled)
	} else {
		c.stall.Reset(wait)
	}
	c.armed = true
}

// stalled runs when the stall timer fires: if requests still queue and
// the statements in flight have stalled, the next batch goes in a slot of
// its own.
func (c *coalescer[Q, R]) stalled() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed = false
	if len(c.queue) == 0 {
		return
	}
	now := time.Now()
	if i, ok := c.slotLocked(now); ok {
		c.batches++
		go c.send(i, c.takeLocked())
	}
	c.armLocked(now)
}

// slotFree ends slot i's statement: the slot goes to the queue's next
// batch, in a goroutine of its own, or is freed.
func (c *coalescer[Q, R]) slotFree(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if batch := c.nextLocked(i); batch != nil {
		c.batches++
		go c.send(i, batch)
	}
}

// nextLocked gives slot i the queue's next batch, or frees it when the
// queue is empty (nil). Requests a batch leaves queued (a key twice,
// another epoch, more than maxCoalesce) get the stall timer too.
func (c *coalescer[Q, R]) nextLocked(i int) []*queued[Q, R] {
	batch := c.takeLocked()
	if batch == nil {
		c.slots[i] = time.Time{}
		return nil
	}
	now := time.Now()
	c.slots[i] = now
	c.armLocked(now)
	return batch
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

// send sends batch in slot i, hands each caller its outcome, and goes on
// with the next batch while there is one.
func (c *coalescer[Q, R]) send(i int, batch []*queued[Q, R]) {
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
		next := c.nextLocked(i)
		if next == nil {
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
	if c.stall != nil {
		c.stall.Stop()
		c.armed = false
	}
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

// stallCount is how many slots opened because the statements in flight
// had stalled.
func (c *coalescer[Q, R]) stallCount() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stalls
}
