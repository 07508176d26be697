package effects

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// awaiter wakes Await calls when their effect's outcome is written: one
// LISTEN connection per Outbox on its outcome channel (the statements that
// make an effect final notify it with the id), open only while some Await
// is waiting. The first Await starts it, the last one stops it and waits
// for it to end. Notifications lost while the connection is down are
// covered by Await's poll, and by a wake-up of every waiter on each
// (re)connect.
type awaiter struct {
	mu      sync.Mutex
	waiters map[uuid.UUID]map[chan struct{}]struct{}
	n       int           // registered waiters
	cancel  func()        // stops the listener; nil when none runs
	done    chan struct{} // closed when the listener ended
}

// register adds a waiter for id and starts the listener if none runs.
func (a *awaiter) register(o *Outbox, id uuid.UUID) chan struct{} {
	ch := make(chan struct{}, 1)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.waiters == nil {
		a.waiters = map[uuid.UUID]map[chan struct{}]struct{}{}
	}
	if a.waiters[id] == nil {
		a.waiters[id] = map[chan struct{}]struct{}{}
	}
	a.waiters[id][ch] = struct{}{}
	a.n++
	if a.cancel == nil {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		a.cancel, a.done = cancel, done
		go func() { defer close(done); a.listen(ctx, o) }()
	}
	return ch
}

// unregister removes the waiter; the last one stops the listener and
// waits for it.
func (a *awaiter) unregister(id uuid.UUID, ch chan struct{}) {
	a.mu.Lock()
	delete(a.waiters[id], ch)
	if len(a.waiters[id]) == 0 {
		delete(a.waiters, id)
	}
	a.n--
	var cancel func()
	var done chan struct{}
	if a.n == 0 && a.cancel != nil {
		cancel, done = a.cancel, a.done
		a.cancel, a.done = nil, nil
	}
	a.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// wake signals the waiters of id, or all of them for uuid.Nil.
func (a *awaiter) wake(id uuid.UUID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	signal := func(ws map[chan struct{}]struct{}) {
		for ch := range ws {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
	if id == uuid.Nil {
		for _, ws := range a.waiters {
			signal(ws)
		}
		return
	}
	signal(a.waiters[id])
}

// listen keeps a LISTEN connection on the outcome channel until ctx ends;
// after a failure it waits AwaitPoll (Await polls meanwhile) and tries
// again.
func (a *awaiter) listen(ctx context.Context, o *Outbox) {
	for ctx.Err() == nil {
		err := a.listenOnce(ctx, o)
		if ctx.Err() != nil {
			return
		}
		o.log.Debug("effects: await listener", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(o.awaitPoll):
		}
	}
}

func (a *awaiter) listenOnce(ctx context.Context, o *Outbox) error {
	conn, err := pgx.ConnectConfig(ctx, o.pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{o.outcomes}.Sanitize()); err != nil {
		return err
	}
	a.wake(uuid.Nil) // outcomes written before the LISTEN: read again
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if id, err := uuid.Parse(n.Payload); err == nil {
			a.wake(id)
		}
	}
}
