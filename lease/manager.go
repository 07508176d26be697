package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/fence"
)

// Manager acquires, renews and releases leases in one schema. It runs one
// background renewer for all the leases it holds and, once AcquireWait is
// first used, one LISTEN connection. Its methods are safe for concurrent use.
// Close stops everything it started.
type Manager struct {
	cfg  resolved
	pool *pgxpool.Pool
	st   statements
	log  *slog.Logger
	obs  observer
	met  *metrics

	root       context.Context // cancelled (cause ErrClosed) by Close
	rootCancel context.CancelCauseFunc
	wg         sync.WaitGroup

	mu     sync.Mutex
	closed bool
	leases map[uuid.UUID]*Lease // held leases by run_id

	lmu        sync.Mutex // listener and waiters
	lstarted   bool
	lready     chan struct{} // closed while the LISTEN connection is up
	waiters    map[string]map[*waiter]struct{}
	closeOnce  sync.Once
	closeError error
}

// New validates cfg, fills defaults and starts the renewer.
func New(cfg Config) (*Manager, error) { return newManager(cfg, noopObserver{}) }

// newManager builds the Manager. Its goroutines run on a context the
// Manager owns (cancelled by Close), never on a caller's.
//
//nolint:contextcheck // deliberately not inheriting a caller's context
func newManager(cfg Config, obs observer) (*Manager, error) {
	r, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	root, cancel := context.WithCancelCause(context.Background())
	m := &Manager{
		cfg:        r,
		pool:       r.Pool,
		st:         newStatements(r.qSchema, r.Schema),
		log:        r.Logger,
		obs:        obs,
		root:       root,
		rootCancel: cancel,
		leases:     make(map[uuid.UUID]*Lease),
		lready:     make(chan struct{}),
		waiters:    make(map[string]map[*waiter]struct{}),
	}
	met, err := newMetrics(r.MeterProvider, r.TTL)
	if err != nil {
		cancel(nil)
		return nil, &ConfigError{Field: "MeterProvider", Reason: "creating instruments: " + err.Error(), Err: err}
	}
	m.met = met
	m.wg.Add(1)
	go m.renewLoop()
	return m, nil
}

// TTL is the configured lease length.
func (m *Manager) TTL() time.Duration { return m.cfg.TTL }

// TrustWindow is TTL − SafetyMargin: how long after sent_at a grant or
// renewal is trusted locally.
func (m *Manager) TrustWindow() time.Duration { return m.cfg.TTL - m.cfg.SafetyMargin }

func (m *Manager) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

func (m *Manager) ttlMicros() int64 { return m.cfg.TTL.Microseconds() }

// call bounds one statement by CallTimeout.
func (m *Manager) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, m.cfg.CallTimeout)
}

func (m *Manager) authorize(ctx context.Context, key Key) error {
	if m.cfg.Authorizer == nil {
		return nil
	}
	if err := m.cfg.Authorizer.Authorize(ctx, key); err != nil {
		m.met.onRefused(ctx, ReasonUnauthorized)
		m.log.Debug("lease acquire unauthorized", "key", key.String(), "err", err)
		return fmt.Errorf("%w: %s: %w", ErrUnauthorized, key, err)
	}
	return nil
}

// Acquire takes the lease for key if it is free (never acquired, released or
// expired on the database clock), in one statement. Before that, the
// Authorizer runs; a refusal returns an error matching ErrUnauthorized and
// sends nothing. A held lease returns a *HeldError (matching ErrHeld). The
// returned Lease is renewed in the background until it is released, lost,
// or the Manager is closed.
//
// ctx bounds the call only. The lease's Context keeps ctx's values (user
// id, trace span, logger) but not its cancellation or deadline
// (context.WithoutCancel): the lease lives until it is released or lost.
// Use Run to tie the work to a caller's ctx.
func (m *Manager) Acquire(ctx context.Context, key Key) (*Lease, error) {
	if err := key.Validate(); err != nil {
		return nil, err
	}
	if m.isClosed() {
		return nil, ErrClosed
	}
	if err := m.authorize(ctx, key); err != nil {
		return nil, err
	}
	return m.tryAcquire(ctx, key)
}

func (m *Manager) tryAcquire(ctx context.Context, key Key) (*Lease, error) {
	runID, err := uuid.NewRandom()
	if err != nil {
		return nil, fmt.Errorf("lease: new run_id: %w", err)
	}
	cctx, cancel := m.call(ctx)
	defer cancel()
	sentAt := time.Now() // before the request leaves: the trust window starts here
	var (
		won          bool
		rid          uuid.UUID
		token        int64
		expires, now time.Time
		contended    bool // holder's row already asks its release to NOTIFY
	)
	err = m.pool.QueryRow(cctx, m.st.acquire, key.AccountID, key.SessionID, runID, m.ttlMicros()).
		Scan(&won, &rid, &token, &expires, &now, &contended)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		// Refused, and the holder's row was committed after our snapshot.
		held := &HeldError{Key: key}
		if st, ierr := m.inspect(ctx, key); ierr == nil && st.Status == StatusHeld {
			held.RunID, held.Token, held.ExpiresAt, held.Remaining = st.RunID, st.Token, st.ExpiresAt, st.Remaining
		}
		m.obs.held(key, held.Remaining)
		m.met.onRefused(ctx, ReasonHeld)
		return nil, held
	case grantRefusal(err) != nil:
		// The database refused the grant (token floor or unchecked node,
		// migration 0004): the statement failed as a whole, no row written.
		m.obs.acquireFailed(key, err)
		return nil, m.grantRefused(ctx, key, grantRefusal(err))
	case err != nil:
		// The statement may have committed with the reply lost: free the
		// row of this run_id if we can (it expires by TTL otherwise).
		m.releaseOrphan(key, runID) //nolint:contextcheck // runs after the caller's ctx may be gone; bounded by CallTimeout under the Manager's context
		m.obs.acquireFailed(key, err)
		m.met.onRefused(ctx, ReasonError)
		m.log.Debug("lease acquire failed", "key", key.String(), "err", err)
		return nil, fmt.Errorf("lease: acquire %s: %w", key, err)
	case !won:
		held := &HeldError{Key: key, RunID: rid, Token: fence.Token(token), ExpiresAt: expires, Remaining: max(expires.Sub(now), 0), contended: contended}
		m.obs.held(key, held.Remaining)
		m.met.onRefused(ctx, ReasonHeld)
		return nil, held
	}
	l := m.newLease(ctx, key, runID, fence.Token(token), expires, sentAt)
	if l == nil { // closed while acquiring
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.CallTimeout)
		defer rcancel()
		_, _ = m.release(rctx, key, runID)
		return nil, ErrClosed
	}
	m.obs.acquired(key, token, time.Since(sentAt))
	m.met.onAcquired(ctx)
	m.met.onHeld(ctx, 1) // the -1 (end or Close) may come first; the sum is right once both are in
	m.log.Debug("lease acquired", "key", key.String(), "run_id", runID, "token", token)
	return l, nil
}

// releaseOrphan releases the row of a run whose acquire reply was lost, in
// the background, bounded by CallTimeout; it gives up when the Manager closes.
func (m *Manager) releaseOrphan(key Key, runID uuid.UUID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		ctx, cancel := m.call(m.root)
		defer cancel()
		if res, err := m.release(ctx, key, runID); err != nil {
			m.log.Debug("orphan release failed; the row expires by TTL", "key", key.String(), "run_id", runID, "err", err)
		} else {
			m.log.Debug("orphan release", "key", key.String(), "run_id", runID, "result", res.String())
		}
	}()
}

// Status is the server's view of a key.
type Status uint8

const (
	// StatusNotFound means no row: the key was never acquired (or its row was
	// removed by housekeeping).
	StatusNotFound Status = iota
	// StatusHeld means a run holds an unexpired lease.
	StatusHeld
	// StatusExpired means the last holder did not renew in time; anyone may acquire.
	StatusExpired
	// StatusReleased means the last holder released it; anyone may acquire.
	StatusReleased
)

func (s Status) String() string {
	switch s {
	case StatusNotFound:
		return "not-found"
	case StatusHeld:
		return "held"
	case StatusExpired:
		return "expired"
	case StatusReleased:
		return "released"
	}
	return fmt.Sprintf("Status(%d)", s)
}

// State is the database's answer to "who owns this key now". All times are
// database times; Remaining is ExpiresAt − DBNow when held, else 0.
type State struct {
	Key        Key
	Status     Status
	RunID      uuid.UUID   // last grant's run (zero when not found)
	Token      fence.Token // last grant's token (0 when not found)
	AcquiredAt time.Time
	RenewedAt  time.Time
	ExpiresAt  time.Time
	ReleasedAt time.Time // zero unless released
	DBNow      time.Time
	Remaining  time.Duration
}

// Held reports Status == StatusHeld.
func (s State) Held() bool { return s.Status == StatusHeld }

// Inspect reads the key's row in one statement. A key never acquired is a
// State with StatusNotFound, not an error.
func (m *Manager) Inspect(ctx context.Context, key Key) (State, error) {
	if err := key.Validate(); err != nil {
		return State{}, err
	}
	if m.isClosed() {
		return State{}, ErrClosed
	}
	return m.inspect(ctx, key)
}

func (m *Manager) inspect(ctx context.Context, key Key) (State, error) {
	cctx, cancel := m.call(ctx)
	defer cancel()
	var (
		rid                *uuid.UUID
		token              *int64
		acq, ren, exp, rel *time.Time
		now                time.Time
	)
	if err := m.pool.QueryRow(cctx, m.st.inspect, key.AccountID, key.SessionID).
		Scan(&rid, &token, &acq, &ren, &exp, &rel, &now); err != nil {
		return State{}, fmt.Errorf("lease: inspect %s: %w", key, err)
	}
	st := State{Key: key, DBNow: now}
	if rid == nil {
		return st, nil
	}
	st.RunID, st.Token, st.AcquiredAt, st.RenewedAt, st.ExpiresAt = *rid, fence.Token(*token), *acq, *ren, *exp
	switch {
	case rel != nil:
		st.Status, st.ReleasedAt = StatusReleased, *rel
	case exp.After(now):
		st.Status, st.Remaining = StatusHeld, exp.Sub(now)
	default:
		st.Status = StatusExpired
	}
	return st, nil
}

// Renewal is the outcome of a successful renew.
type Renewal struct {
	Token     fence.Token
	ExpiresAt time.Time // database time
	DBNow     time.Time
	// TrustDeadline is sent_at + TTL − SafetyMargin on the local monotonic
	// clock, sent_at being taken before the request left.
	TrustDeadline time.Time
}

// Renew extends the lease of (key, runID) if that run still holds it
// unexpired. It is the run_id-addressed form for processes that do not keep
// a *Lease (CLIs); a Lease of this Manager with that run_id has its trust
// deadline extended too. Renewing is idempotent: a retry after a lost reply
// succeeds again while the run holds the lease. When the run does not
// (expired, released or taken over) the error matches ErrLost and nothing
// changes; a Lease of this Manager with that run_id is then cancelled.
func (m *Manager) Renew(ctx context.Context, key Key, runID uuid.UUID) (Renewal, error) {
	if err := key.Validate(); err != nil {
		return Renewal{}, err
	}
	if runID == uuid.Nil {
		return Renewal{}, ErrInvalidRunID
	}
	if m.isClosed() {
		return Renewal{}, ErrClosed
	}
	r, err := m.renewOne(ctx, key, runID)
	if l := m.lookup(key, runID); l != nil {
		switch {
		case err == nil:
			l.extend(time.Time{}, r.TrustDeadline, r.ExpiresAt)
		case errors.Is(err, ErrLost):
			l.end(ErrLost)
		}
	}
	return r, err
}

func (m *Manager) renewOne(ctx context.Context, key Key, runID uuid.UUID) (Renewal, error) {
	cctx, cancel := m.call(ctx)
	defer cancel()
	sentAt := time.Now()
	var (
		token    int64
		exp, now time.Time
	)
	err := m.pool.QueryRow(cctx, m.st.renew, key.AccountID, key.SessionID, runID, m.ttlMicros()).Scan(&token, &exp, &now)
	if errors.Is(err, pgx.ErrNoRows) {
		err = fmt.Errorf("%w: %s run %s no longer holds an unexpired lease", ErrLost, key, runID)
	} else if err != nil {
		err = fmt.Errorf("lease: renew %s: %w", key, err)
	}
	m.met.onRenew(ctx, time.Since(sentAt), err)
	if err != nil {
		m.log.Debug("lease renew failed", "key", key.String(), "run_id", runID, "err", err)
		return Renewal{}, err
	}
	m.log.Debug("lease renewed", "key", key.String(), "run_id", runID)
	return Renewal{
		Token: fence.Token(token), ExpiresAt: exp, DBNow: now,
		TrustDeadline: sentAt.Add(m.cfg.TTL - m.cfg.SafetyMargin),
	}, nil
}

// ReleaseResult is the benign outcome of a release. Every value means the
// run does not hold the lease afterwards.
type ReleaseResult uint8

const (
	// Released means this call released the run's unexpired lease.
	Released ReleaseResult = iota + 1
	// AlreadyReleased means the run had released it before (e.g. a retry after
	// a lost reply).
	AlreadyReleased
	// Expired means the run's lease had expired; nobody holds it now.
	Expired
	// NotHolder means another run has acquired the key since.
	NotHolder
	// NotFound means the key has no row.
	NotFound
)

func (r ReleaseResult) String() string {
	switch r {
	case Released:
		return "released"
	case AlreadyReleased:
		return "already-released"
	case Expired:
		return "expired"
	case NotHolder:
		return "not-holder"
	case NotFound:
		return "not-found"
	}
	return fmt.Sprintf("ReleaseResult(%d)", r)
}

// Release releases the lease of (key, runID) in one statement, keeping the
// row (released_at and expires_at set to the database's now) so per-key
// token order survives, and notifies waiters (pg_notify, delivered at
// commit). It never fails because the run no longer holds the lease: that
// is a ReleaseResult, and a retry reports the true state (AlreadyReleased
// after a release whose reply was lost). A Lease of this Manager with that
// run_id is cancelled (cause ErrReleased) before the statement is sent.
func (m *Manager) Release(ctx context.Context, key Key, runID uuid.UUID) (ReleaseResult, error) {
	if err := key.Validate(); err != nil {
		return 0, err
	}
	if runID == uuid.Nil {
		return 0, ErrInvalidRunID
	}
	if m.isClosed() {
		return 0, ErrClosed
	}
	if l := m.lookup(key, runID); l != nil {
		l.end(ErrReleased)
	}
	return m.release(ctx, key, runID)
}

func (m *Manager) release(ctx context.Context, key Key, runID uuid.UUID) (ReleaseResult, error) {
	cctx, cancel := m.call(ctx)
	defer cancel()
	var (
		n        int64
		rid      *uuid.UUID
		rel, exp *time.Time
		now      time.Time
	)
	err := m.pool.QueryRow(cctx, m.st.release, key.AccountID, key.SessionID, runID, m.st.channel, keyPayload(key)).
		Scan(&n, &rid, &rel, &exp, &now)
	if err != nil {
		err = fmt.Errorf("lease: release %s: %w", key, err)
		m.obs.released(key, 0, err)
		m.met.onReleased(ctx, 0, err)
		m.log.Debug("lease release failed", "key", key.String(), "run_id", runID, "err", err)
		return 0, err
	}
	var res ReleaseResult
	switch {
	case n > 0:
		res = Released
	case rid == nil:
		res = NotFound
	case *rid != runID:
		res = NotHolder
	case rel != nil:
		res = AlreadyReleased
	case !exp.After(now):
		res = Expired
	default:
		// Ours and live in the snapshot, yet not updated: changed
		// concurrently. Read the committed state once.
		st, ierr := m.inspect(ctx, key)
		switch {
		case ierr != nil:
			return 0, ierr
		case st.RunID != runID:
			res = NotHolder
		case st.Status == StatusReleased:
			res = AlreadyReleased
		default:
			res = Expired
		}
	}
	m.obs.released(key, res, nil)
	m.met.onReleased(ctx, res, nil)
	m.log.Debug("lease released", "key", key.String(), "run_id", runID, "result", res.String())
	return res, nil
}

// Close stops the renewer and the listener, cancels the context of every
// lease the Manager holds (cause ErrClosed) and releases them in batched
// statements under a fresh context bounded by CallTimeout. Leases that
// cannot be released then expire by TTL. Close is idempotent; later calls
// return the first call's result. It does not close the pool.
func (m *Manager) Close() error {
	m.closeOnce.Do(func() {
		m.mu.Lock()
		m.closed = true
		held := make([]*Lease, 0, len(m.leases))
		for _, l := range m.leases {
			held = append(held, l)
		}
		m.leases = map[uuid.UUID]*Lease{}
		m.mu.Unlock()

		m.met.onHeld(m.root, -len(held))
		m.rootCancel(ErrClosed) // renewer, listener, waiters
		for _, l := range held {
			if l.stop() {
				l.cancel(ErrClosed)
			}
		}
		m.wg.Wait()

		ctx, cancel := context.WithTimeout(context.Background(), m.cfg.CallTimeout)
		defer cancel()
		m.closeError = m.releaseBatch(ctx, held)
	})
	return m.closeError
}

func (m *Manager) releaseBatch(ctx context.Context, leases []*Lease) error {
	var errs []error
	for start := 0; start < len(leases); start += MaxBatch {
		chunk := leases[start:min(start+MaxBatch, len(leases))]
		accts, sess, runs, payloads := make([]string, len(chunk)), make([]string, len(chunk)), make([]uuid.UUID, len(chunk)), make([]string, len(chunk))
		for i, l := range chunk {
			accts[i], sess[i], runs[i], payloads[i] = l.key.AccountID, l.key.SessionID, l.runID, keyPayload(l.key)
		}
		if _, err := m.pool.Exec(ctx, m.st.releaseBatch, accts, sess, runs, m.st.channel, payloads); err != nil {
			errs = append(errs, fmt.Errorf("lease: release %d leases at close: %w", len(chunk), err))
		}
	}
	return errors.Join(errs...)
}

// lookup returns this Manager's held lease of (key, runID), if any.
func (m *Manager) lookup(key Key, runID uuid.UUID) *Lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.leases[runID]; l != nil && l.key == key {
		return l
	}
	return nil
}

func (m *Manager) remove(l *Lease) {
	m.mu.Lock()
	if m.leases[l.runID] == l {
		delete(m.leases, l.runID)
	}
	m.mu.Unlock()
}
