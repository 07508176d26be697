package lease

import (
	"context"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// Events records a Manager's events (observer.go), for tests.
type Events struct {
	mu       sync.Mutex
	Wakes    []string // wake reasons, in order
	Batches  []int    // sizes of renewal statements that succeeded
	Failed   int      // renewal statements that failed
	LostKeys []Key
	waitingC chan Key
	wokenC   chan string
	listen   chan bool
	lastHeld atomic.Bool // the latest acquire attempt was refused as held (not a failed statement)
}

// NewObserved is New with a hook recording the Manager's events.
func NewObserved(cfg Config) (*Manager, *Events, error) {
	ev := &Events{waitingC: make(chan Key, 1024), wokenC: make(chan string, 1024), listen: make(chan bool, 64)}
	m, err := newManager(cfg, ev.record)
	return m, ev, err
}

// Waiting delivers a key each time an AcquireWait caller goes to sleep.
func (e *Events) Waiting() <-chan Key { return e.waitingC }

// Woken delivers each wake reason ("notify", "expiry", "poll", "reconnect").
func (e *Events) Woken() <-chan string { return e.wokenC }

// Listener delivers true on each listener connect, false on each loss.
func (e *Events) Listener() <-chan bool { return e.listen }

// Snapshot returns copies of the recorded slices.
func (e *Events) Snapshot() (batches []int, failed int, lost []Key) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]int(nil), e.Batches...), e.Failed, append([]Key(nil), e.LostKeys...)
}

// LastHeld reports whether the latest acquire attempt was refused because
// the key is held (rather than failing, which makes a waiter retry after a
// short backoff).
func (e *Events) LastHeld() bool { return e.lastHeld.Load() }

// record is the Manager's hook.
func (e *Events) record(ev event) {
	switch ev.kind {
	case evHeld:
		e.lastHeld.Store(true)
	case evAcquireFailed:
		e.lastHeld.Store(false)
	case evBatch:
		e.mu.Lock()
		if ev.failed {
			e.Failed++
		} else {
			e.Batches = append(e.Batches, ev.n)
		}
		e.mu.Unlock()
	case evLost:
		e.mu.Lock()
		e.LostKeys = append(e.LostKeys, ev.key)
		e.mu.Unlock()
	case evWaiting:
		select {
		case e.waitingC <- ev.key:
		default:
		}
	case evWoken:
		e.mu.Lock()
		e.Wakes = append(e.Wakes, ev.wake.String())
		e.mu.Unlock()
		select {
		case e.wokenC <- ev.wake.String():
		default:
		}
	case evListener:
		select {
		case e.listen <- ev.up:
		default:
		}
	}
}

// Mu guards Wakes, Batches, Failed and LostKeys.
func (e *Events) Mu() *sync.Mutex { return &e.mu }

// ReleaseChannel is the NOTIFY channel releases in schema use.
func ReleaseChannel(schema string) string { return channelName(schema) }

// MuteTakeoverNotify makes m's takeovers notify a channel nobody listens on,
// as if every other Manager's listener were down. Call it right after New.
func MuteTakeoverNotify(m *Manager) { m.st.channel = "fencekit_muted_for_test" }

// CallTimeoutOf is m's effective CallTimeout (Config.CallTimeout or the
// default New derived).
func CallTimeoutOf(m *Manager) time.Duration { return m.cfg.CallTimeout }

// RenewEveryOf is m's effective RenewEvery.
func RenewEveryOf(m *Manager) time.Duration { return m.cfg.RenewEvery }

// HeartbeatMode reports whether m renews by heartbeat.
func HeartbeatMode(m *Manager) bool { return m.cfg.Renewal == RenewalHeartbeat }

// EpochOf is m's current heartbeat epoch id (uuid.Nil before the first
// grant or in per-lease mode).
func EpochOf(m *Manager) uuid.UUID {
	if ep := currentEpoch(m); ep != nil {
		return ep.id
	}
	return uuid.Nil
}

// EpochOfLease is the heartbeat epoch l belongs to (uuid.Nil per-lease).
func EpochOfLease(l *Lease) uuid.UUID {
	if l.ep == nil {
		return uuid.Nil
	}
	return l.ep.id
}

// EndedAt is when l's context was cancelled (zero while it is held): taken
// before the cancellation, under the lease's lock.
func EndedAt(l *Lease) time.Time {
	at, _ := l.ended()
	return at
}

// Unreleased is how many runs of m wait for their release to be confirmed
// (unreleased.go).
func Unreleased(m *Manager) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h, ok := m.ren.(*heartbeatRenewal); ok {
		return len(h.unrel)
	}
	return 0
}

// currentEpoch is m's current heartbeat epoch (nil before the first grant
// or in per-lease mode).
func currentEpoch(m *Manager) *epoch {
	if h, ok := m.ren.(*heartbeatRenewal); ok {
		return h.ep.Load()
	}
	return nil
}

// BeatSQL is m's heartbeat statement.
func BeatSQL(m *Manager) string { return m.st.beat }

// SetBeatSQL replaces m's heartbeat statement (call it right after New):
// a test's stand-in for a reply the database would not send.
func SetBeatSQL(m *Manager, sql string) { m.st.beat = sql }

// HeartbeatFailed reports whether a heartbeat statement of m's current
// epoch failed since its last success (what a later loss is blamed on).
func HeartbeatFailed(m *Manager) bool {
	ep := currentEpoch(m)
	if ep == nil {
		return false
	}
	_, _, failed := ep.state()
	return failed
}

// ServerLoopSides returns the bodies of one lease cycle of m for a PL/pgSQL
// loop (BenchmarkServerLoop): m's acquire and release statement text with
// their parameters named p1…p6 (acquire: account, session, run, TTL µs,
// holder, epoch) and q4, q5 (release: channel, payload; the key and run
// are p1…p3), and the epoch id (uuid.Nil in per-lease mode) that m grants
// under, after making sure it exists.
func ServerLoopSides(ctx context.Context, m *Manager) (acquire, release string, epochID uuid.UUID, err error) {
	ep, err := m.ren.grantEpoch(ctx)
	if err != nil {
		return "", "", uuid.Nil, err
	}
	if ep != nil {
		epochID = ep.id
	}
	param := regexp.MustCompile(`\$([1-9])\b`)
	acquire = param.ReplaceAllString(m.st.acquire, "p$1")
	release = param.ReplaceAllStringFunc(m.st.release, func(p string) string {
		if p == "$4" || p == "$5" {
			return "q" + p[1:]
		}
		return "p" + p[1:]
	})
	return acquire, release, epochID, nil
}

// StatementCycle returns one lease cycle made of m's own acquire and
// release statements sent with pgx directly, with the parameters m binds
// (heartbeat mode: m's epoch, started here), without the Manager's work
// around them: BenchmarkCycle's baseline.
func StatementCycle(ctx context.Context, m *Manager) (func(Key) error, error) {
	ep, err := m.ren.grantEpoch(ctx)
	if err != nil {
		return nil, err
	}
	return func(key Key) error {
		run := uuid.New()
		var (
			token    int64
			expires  pgtype.Timestamptz
			notified bool
		)
		if err := m.pool.QueryRow(ctx, m.st.acquire, key.AccountID, key.SessionID, uuidParam(run), m.ttlArg, nil, epochID(ep)).
			Scan(&token, &expires); err != nil {
			return err
		}
		return m.pool.QueryRow(ctx, m.st.release, key.AccountID, key.SessionID, uuidParam(run), m.channelArg, keyPayload(key)).
			Scan(&notified)
	}, nil
}

// SharedGrants is how many of m's grants went in a statement together with
// other grants (grantbatch.go).
func SharedGrants(m *Manager) int64 { return m.grants.sharedCount() }

// SharedReleases is SharedGrants for releases.
func SharedReleases(m *Manager) int64 { return m.releases.sharedCount() }

// StalledGrantSlots is how many times m's grants got a statement slot of
// their own because the grant statements in flight had stalled.
func StalledGrantSlots(m *Manager) int64 { return m.grants.stallCount() }

// RenewBatchNow sends the batched renewal statement (per-lease mode) for l
// now, as the renewer does for a lease it collected before l was parked
// and whose statement lands after the park; false when the statement
// failed.
func RenewBatchNow(m *Manager, l *Lease) bool { return m.renewChunk([]*Lease{l}) }
