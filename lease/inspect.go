package lease

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/fencekit/fencekit/fence"
)

// State is what the database says of a key: never acquired, held,
// expired or released.
type State uint8

const (
	// StateNotFound means no row: the key was never acquired (or its row was
	// removed by housekeeping).
	StateNotFound State = iota
	// StateHeld means a run holds an unexpired lease.
	StateHeld
	// StateExpired means the last holder did not renew in time; anyone may acquire.
	StateExpired
	// StateReleased means the last holder released it; anyone may acquire.
	StateReleased
)

func (s State) String() string {
	switch s {
	case StateNotFound:
		return "not-found"
	case StateHeld:
		return "held"
	case StateExpired:
		return "expired"
	case StateReleased:
		return "released"
	}
	return fmt.Sprintf("State(%d)", s)
}

// Ownership is the database's answer to "who owns this key now". All times are
// database times; Remaining is ExpiresAt − DBNow when held, else 0.
type Ownership struct {
	Key        Key
	State      State
	RunID      uuid.UUID   // last grant's run (zero when not found)
	Token      fence.Token // last grant's token (0 when not found)
	AcquiredAt time.Time
	RenewedAt  time.Time
	ExpiresAt  time.Time
	ReleasedAt time.Time // zero unless released
	Holder     string    // last grant's holder label (WithHolder), "" when none
	DBNow      time.Time
	Remaining  time.Duration
	// Parked is set when the grant is held and parked (Lease.Park): no
	// Manager holds or renews it; it expires at ExpiresAt unless
	// Manager.Resume takes it back first.
	Parked bool
}

// Held reports State == StateHeld.
func (o Ownership) Held() bool { return o.State == StateHeld }

// Inspect reads the key's row in one statement. A key never acquired is a
// Ownership with StateNotFound, not an error.
func (m *Manager) Inspect(ctx context.Context, key Key) (Ownership, error) {
	if err := key.Validate(); err != nil {
		return Ownership{}, err
	}
	if m.isClosed() {
		return Ownership{}, ErrClosed
	}
	return m.inspect(ctx, key)
}

func (m *Manager) inspect(ctx context.Context, key Key) (Ownership, error) {
	cctx, cancel := m.call(ctx)
	defer cancel()
	var (
		rid                *uuid.UUID
		token              *int64
		acq, ren, exp, rel *time.Time
		now                time.Time
		holder             *string
		parked             bool
	)
	if err := m.pool.QueryRow(cctx, m.st.inspect, key.AccountID, key.SessionID).
		Scan(&rid, &token, &acq, &ren, &exp, &rel, &now, &holder, &parked); err != nil {
		return Ownership{}, fmt.Errorf("lease: inspect %s: %w", key, classify(err))
	}
	if rid == nil {
		return Ownership{Key: key, DBNow: now}, nil
	}
	return ownershipOf(key, *rid, fence.Token(*token), *acq, *ren, *exp, rel, holder, now, parked), nil
}
