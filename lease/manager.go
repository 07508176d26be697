package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/lease/internal/leasemetrics"
)

// Manager acquires, renews and releases leases in one schema. It runs one
// background renewer for all the leases it holds (in heartbeat mode, the
// default, one heartbeat statement per renewal period for all of them) and, from its first grant
// or waiter until Close, one LISTEN connection (its own, opened with the
// pool's connection settings or Config.ListenConnString) that wakes waiters
// and tells holders of a takeover, and that checks that notifications
// actually reach it (Health). Its methods are safe for concurrent use.
// Close stops everything it started.
type Manager struct {
	cfg  resolved
	pool *pgxpool.Pool
	st   statements
	log  *slog.Logger
	hook func(event) // tests only (observer.go); nil in production
	met  *metrics
	tr   trace.Tracer // nil: tracing off (trace.go)

	// ttlArg and channelArg are the TTL in microseconds and the NOTIFY
	// channel as statement parameters, boxed once: every grant and
	// release binds one of them.
	ttlArg, channelArg any

	floor *floorChecker // the automatic token floor check (Config.Floor), nil without a source

	ren renewal // the renewal mode, chosen once in New (renewalmode.go)

	// grants and releases send the acquire and release statements, alone
	// or shared by concurrent callers (coalesce.go, grantbatch.go).
	grants   *coalescer[grantReq, grantResult]
	releases *coalescer[releaseReq, releaseResult]
	// renewBatch is the number of leases per renewal statement (renewDue):
	// MaxBatch, lowered only by tests (to exercise many parallel batches
	// with few leases).
	renewBatch atomic.Int64

	root       context.Context // cancelled (cause ErrClosed) by Close
	rootCancel context.CancelCauseFunc
	wg         sync.WaitGroup

	mu sync.Mutex
	// closed is set by Close under mu, so that whoever holds mu sees it
	// settled (newLease registers a lease only while it is false); the
	// calls' first check (isClosed) reads it without the lock.
	closed atomic.Bool
	leases map[uuid.UUID]*Lease // held leases by run_id
	// granting holds the run_ids whose grant statement is in flight, with
	// the cause to end the lease with at registration when a notification
	// or a heartbeat reported the run displaced or revoked before its reply
	// came back (nil: none).
	granting map[uuid.UUID]error

	fan         *fanout     // the listener's notifications, by key (listener.go)
	watches     watches     // Watch's shared readers, by key (watch.go)
	listening   atomic.Bool // the listener was started
	firstListen sync.Once   // closes listenFirst
	// listenFirst is closed once the listener's first connection has
	// LISTEN in place, or its first attempt failed (awaitListener).
	listenFirst chan struct{}
	lh          listenHealth
	lastRound   atomic.Int64 // unix ns: end of the last renewal round without a failed statement
	refusals    refusalLog
	closeOnce   sync.Once
	closeError  error
}

// New validates cfg, fills defaults and starts the renewer. It sends no
// statement.
func New(cfg Config) (*Manager, error) { return newManager(cfg, nil) }

// newManager builds the Manager. Its goroutines run on a context the
// Manager owns (cancelled by Close), never on a caller's.
//
//nolint:contextcheck // deliberately not inheriting a caller's context
func newManager(cfg Config, hook func(event)) (*Manager, error) {
	r, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	root, cancel := context.WithCancelCause(context.Background())
	m := &Manager{
		cfg:         r,
		pool:        r.Pool,
		st:          newStatements(r.qSchema, r.Schema),
		log:         r.Logger,
		hook:        hook,
		root:        root,
		rootCancel:  cancel,
		leases:      make(map[uuid.UUID]*Lease),
		granting:    make(map[uuid.UUID]error),
		fan:         newFanout(),
		listenFirst: make(chan struct{}),
		floor:       newFloorChecker(r),
	}
	m.ttlArg, m.channelArg = m.ttlMicros(), m.st.channel
	m.renewBatch.Store(MaxBatch)
	m.grants, m.releases = newGrants(m), newReleases(m)
	met, err := newMetrics(r.MeterProvider, r.TTL)
	if err != nil {
		cancel(nil)
		return nil, configErr("MeterProvider", "creating instruments", err)
	}
	m.met = met
	m.tr = newTracer(r.TracerProvider)
	m.lastRound.Store(time.Now().UnixNano())
	m.ren = newRenewal(m)
	m.ren.start()
	return m, nil
}

// whenClosed calls f (in a goroutine of its own) when Close runs; the
// returned stop prevents that if it has not run yet.
func (m *Manager) whenClosed(f func()) (stop func() bool) {
	return context.AfterFunc(m.root, f)
}

// TTL is the configured lease length.
func (m *Manager) TTL() time.Duration { return m.cfg.TTL }

// TrustWindow is TTL − SafetyMargin: how long after sent_at a grant or
// renewal is trusted locally.
func (m *Manager) TrustWindow() time.Duration { return m.cfg.TTL - m.cfg.SafetyMargin }

func (m *Manager) isClosed() bool { return m.closed.Load() }

func (m *Manager) ttlMicros() int64 { return m.cfg.TTL.Microseconds() }

// background is the context of the Manager's own statements (renewer,
// heartbeat, listener, release retries, watchers): the root's values
// without its cancellation, so that Close does not interrupt a statement
// in flight. pgx closes a connection whose statement's context ends and
// sends a cancel request for it, which PgBouncer 1.18 to 1.20 can exit on
// (docs/operations.md, "PgBouncer version"). Each statement is still bounded
// by CallTimeout, and the loops stop between statements.
func (m *Manager) background() context.Context { return context.WithoutCancel(m.root) }

// call bounds one statement by CallTimeout; the caller calls the returned
// cancel func when the statement returns. A ctx whose deadline comes within
// CallTimeout already bounds the statement as tightly: it is used as it is.
func (m *Manager) call(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= m.cfg.CallTimeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, m.cfg.CallTimeout)
}

func (m *Manager) authorize(ctx context.Context, key Key) error {
	if m.cfg.Authorizer == nil {
		return nil
	}
	if err := m.cfg.Authorizer.Authorize(ctx, key); err != nil {
		m.met.onRefused(ctx, leasemetrics.ReasonUnauthorized)
		m.log.Debug("lease acquire unauthorized", "key", key.String(), "err", err)
		return fmt.Errorf("%w: %s: %w", ErrUnauthorized, key, err)
	}
	return nil
}

// Close stops the renewer and the listener, cancels the context of every
// lease the Manager holds (cause ErrClosed) and releases them, with the
// runs whose earlier release was not confirmed, in batched statements
// under a fresh context bounded by CallTimeout; in heartbeat mode it also
// ends the heartbeat, which frees every row of it at once. Rows it cannot
// release or end then expire by TTL. Close is idempotent; later calls
// return the first call's result. It does not close the pool.
func (m *Manager) Close() error {
	m.closeOnce.Do(func() {
		m.mu.Lock()
		m.closed.Store(true)
		held := make([]*Lease, 0, len(m.leases))
		for _, l := range m.leases {
			held = append(held, l)
		}
		m.leases = map[uuid.UUID]*Lease{}
		runs := m.ren.takeUnconfirmed()
		m.mu.Unlock()
		for _, l := range held {
			runs = append(runs, unreleased{key: l.key, run: l.runID})
		}

		m.met.onHeld(m.root, -len(held))
		m.rootCancel(ErrClosed) // renewer, listener, waiters
		for _, l := range held {
			if l.stop() {
				l.cancel(ErrClosed)
			}
		}
		m.wg.Wait()
		m.grants.close()
		m.releases.close()

		ctx, cancel := context.WithTimeout(context.Background(), m.cfg.CallTimeout)
		defer cancel()
		m.closeError = errors.Join(m.releaseRuns(ctx, runs), m.ren.close(ctx))
	})
	return m.closeError
}

func (m *Manager) lookup(key Key, runID uuid.UUID) *Lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.leases[runID]; l != nil && l.key == key {
		return l
	}
	return nil
}

// beginGrant records a grant of runID in flight (endGrant removes it), so
// that news of the run that arrives before the grant's reply is kept for
// newLease (leaseOrGrant).
func (m *Manager) beginGrant(runID uuid.UUID) {
	m.mu.Lock()
	m.granting[runID] = nil
	m.mu.Unlock()
}

// endGrant forgets the grant of runID in flight.
func (m *Manager) endGrant(runID uuid.UUID) {
	m.mu.Lock()
	delete(m.granting, runID)
	m.mu.Unlock()
}

// leaseOrGrant returns the held lease of run id; when there is none but a
// grant of that run is in flight, it records cause for the grant to end
// the lease with as soon as it registers it (a takeover or revocation that
// committed while the grant's reply was on its way) and returns nil.
func (m *Manager) leaseOrGrant(id uuid.UUID, cause error) *Lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.leases[id]; l != nil {
		return l
	}
	if prev, ok := m.granting[id]; ok && prev == nil {
		m.granting[id] = cause
	}
	return nil
}

func (m *Manager) remove(l *Lease) {
	m.mu.Lock()
	if m.leases[l.runID] == l {
		delete(m.leases, l.runID)
		m.ren.detach(l)
	}
	m.mu.Unlock()
}
