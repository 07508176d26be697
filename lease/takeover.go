package lease

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Takeover grants the lease for key even though another run may hold it
// ("continue here" when the user switches device while the old run is still
// alive), in one statement, after the Authorizer. The grant is like
// Acquire's: a new run_id and a token larger than every earlier grant's,
// drawn under the row lock, under the same token-floor checks.
//
// The run it displaced, if any still held the key, is told at once: the
// statement notifies its Manager's listener, which cancels that Lease's
// context with cause ErrTakenOver (a Lease of this Manager is cancelled
// before Takeover returns). From then on the old run's renewals are refused
// and its release changes nothing (ReleaseNotHolder); guards refuse its
// writes once the new holder has written with the larger token. Work the
// old run has in flight is not stopped by the database: only its context
// and the guards stop it.
//
// ctx bounds the call and gives its values to the lease, as with Acquire;
// opts apply to the grant (WithHolder). When the grant is refused on a node
// whose token floor was not checked and Config.Floor names a source, the
// Manager checks the floor and tries once more, as Acquire does (the
// Authorizer runs once per call).
func (m *Manager) Takeover(ctx context.Context, key Key, opts ...Option) (l *Lease, err error) {
	ctx, sp := m.startSpan(ctx, spanTakeover, key)
	defer func() { sp.endGrant(l, err) }()
	o, err := m.admit(ctx, key, opts)
	if err != nil {
		return nil, err
	}
	return m.grant(ctx, grantTakeover, key, o)
}

// refusedCauses returns, for leases whose renewal the database refused, the
// cause to end each with: ErrTakenOver for a run a takeover displaced,
// ErrLost otherwise (also when the question cannot be answered).
func (m *Manager) refusedCauses(ctx context.Context, refused []*Lease) []error {
	causes := make([]error, len(refused))
	taken, _ := m.displacedRuns(ctx, m.pool, refused)
	for i, l := range refused {
		causes[i] = ErrLost
		if taken[l.runID] {
			causes[i] = ErrTakenOver
		}
	}
	return causes
}

// endDisplacedRuns ends, with ErrTakenOver, every lease of this Manager
// that a takeover displaced, asking by run_id (MaxBatch per statement):
// the per-lease mode's catch-up and polling fallback (perlease.go).
func (m *Manager) endDisplacedRuns(ctx context.Context, q querier) {
	m.mu.Lock()
	held := make([]*Lease, 0, len(m.leases))
	for _, l := range m.leases {
		held = append(held, l)
	}
	m.mu.Unlock()
	for len(held) > 0 {
		n := min(len(held), MaxBatch)
		taken, err := m.displacedRuns(ctx, q, held[:n])
		if err != nil {
			m.log.Warn("lease: checking for takeovers after the listener connected", "err", err)
			return
		}
		for _, l := range held[:n] {
			if taken[l.runID] {
				l.end(ErrTakenOver)
			}
		}
		held = held[n:]
	}
}

// querier is what displacedRuns sends its statement through: the pool, or
// the listener's connection.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// displacedRuns asks the database which of ls a takeover displaced, in one
// statement on fencekit_displaced (migration 0007), which keeps every
// displaced run, not only the last one of each key.
func (m *Manager) displacedRuns(ctx context.Context, q querier, ls []*Lease) (map[uuid.UUID]bool, error) {
	if len(ls) == 0 {
		return nil, nil
	}
	accts, sess, runs := make([]string, len(ls)), make([]string, len(ls)), make([]string, len(ls))
	for i, l := range ls {
		accts[i], sess[i], runs[i] = l.key.AccountID, l.key.SessionID, l.runID.String()
	}
	cctx, cancel := m.call(ctx)
	defer cancel()
	rows, err := q.Query(cctx, m.st.displaced, accts, sess, runs)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	taken := make(map[uuid.UUID]bool)
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		id, err := uuid.Parse(s)
		if err != nil {
			return nil, err
		}
		taken[id] = true
	}
	return taken, rows.Err()
}

// errTakenOverRenew is the error of a renewal refused because a takeover
// displaced the run: it matches ErrLost (the renewal was refused) and
// ErrTakenOver (why).
func errTakenOverRenew(key Key, runID uuid.UUID) error {
	return fmt.Errorf("%w: %s run %s was taken over by another run (%w)", ErrLost, key, runID, ErrTakenOver)
}

// wasTakenOver reports whether a takeover displaced run while it held key.
func (m *Manager) wasTakenOver(ctx context.Context, key Key, run uuid.UUID) bool {
	l := &Lease{key: key, runID: run}
	return errors.Is(m.refusedCauses(ctx, []*Lease{l})[0], ErrTakenOver)
}

// lossCause is the context cause for a refused renewal's error.
func lossCause(err error) error {
	if errors.Is(err, ErrTakenOver) {
		return ErrTakenOver
	}
	return ErrLost
}
