package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease/internal/instrument"
)

// ErrTokenFloor is matched by *TokenFloorError: the token sequence is not
// above the token floor, typically after a database restore or a failover
// to a replica that had not received the latest grants. Tokens at or below
// the floor would be refused by the guards (below) or, worse, re-issue a
// token a guard has already accepted from another run (equal).
var ErrTokenFloor = errors.New("lease: token sequence not above the token floor")

// ErrFailoverUnchecked is matched by *FailoverError: the database refused a
// grant because its token floor was last checked on another node (another
// timeline after a promotion, another database or cluster after a restore).
// Grants stay refused, for every process, until the floor check of package
// leaseops passes on the new node.
var ErrFailoverUnchecked = errors.New("lease: token floor not checked since failover or restore")

// TokenFloorError reports a sequence that is not above the floor. It
// matches ErrTokenFloor.
type TokenFloorError struct {
	// Token is the value the database drew and refused (from Acquire), or
	// the next value the sequence would issue (from the floor check).
	Token fence.Token
	// Floor is the floor the token must exceed.
	Floor fence.Token
}

func (e *TokenFloorError) Error() string {
	return fmt.Sprintf("lease: token sequence behind the token floor: token %d is not above floor %d (advance the sequence with leaseops.TokenFloor.Advance)", e.Token, e.Floor)
}

// Is reports whether target is ErrTokenFloor.
func (e *TokenFloorError) Is(target error) bool { return target == ErrTokenFloor }

// FailoverError reports a grant refused on a node whose token floor was
// never checked. It matches ErrFailoverUnchecked. A node is
// "<system identifier>:<database oid>/<timeline>" as the database names it.
type FailoverError struct {
	// Checked is the node the floor was last checked on ("" if never).
	Checked string
	// Node is the node that refused the grant.
	Node string
}

func (e *FailoverError) Error() string {
	checked := e.Checked
	if checked == "" {
		checked = "none"
	}
	return fmt.Sprintf("lease: grants refused until the token floor is checked on this node (checked on %s, running on %s; failover or restore?)", checked, e.Node)
}

// Is reports whether target is ErrFailoverUnchecked.
func (e *FailoverError) Is(target error) bool { return target == ErrFailoverUnchecked }

// SQLSTATEs raised by migration 0004's fencekit_refuse_grant.
const (
	floorSQLState    = "FK001"
	failoverSQLState = "FK002"
)

// grantRefusal returns the typed refusal that err carries (a
// *TokenFloorError or a *FailoverError), or nil.
func grantRefusal(err error) error {
	var pe *pgconn.PgError
	if err == nil || !errors.As(err, &pe) {
		return nil
	}
	switch pe.Code {
	case floorSQLState:
		fe := &TokenFloorError{}
		var t, f int64
		if _, serr := fmt.Sscanf(pe.Detail, "token=%d floor=%d", &t, &f); serr == nil {
			fe.Token, fe.Floor = fence.Token(t), fence.Token(f)
		}
		return fe
	case failoverSQLState:
		fe := &FailoverError{}
		for _, part := range strings.Fields(pe.Detail) {
			if v, ok := strings.CutPrefix(part, "checked="); ok {
				fe.Checked = v
			} else if v, ok := strings.CutPrefix(part, "node="); ok {
				fe.Node = v
			}
		}
		return fe
	}
	return nil
}

// grantRefused records and returns a grant refused by the database
// (refusal from grantRefusal): the statement failed as a whole, no row was
// written. Metrics count every refusal; the log gets one Error record when
// refusals start or their reason changes, then at most one per
// refusalSummaryEvery with the count (refusalLog), since every waiter of
// every Manager retries while the floor check is pending.
func (m *Manager) grantRefused(ctx context.Context, key Key, refusal error) error {
	var (
		fe *TokenFloorError
		fo *FailoverError
	)
	switch {
	case errors.As(refusal, &fe):
		m.met.onRefused(ctx, instrument.ReasonTokenFloor)
		full, summary, n, since := m.refusals.refused("token_floor")
		switch {
		case full:
			m.log.Error("lease acquire refused: the token sequence is not above the token floor (restore or failover?); advance it with leaseops.TokenFloor",
				"key", key.String(), "token", int64(fe.Token), "floor", int64(fe.Floor))
		case summary:
			m.log.Error("lease acquire still refused: token sequence not above the token floor",
				"refusals", n, "refused_since", since, "token", int64(fe.Token), "floor", int64(fe.Floor))
		}
	case errors.As(refusal, &fo):
		m.met.onRefused(ctx, instrument.ReasonFailoverUnchecked)
		full, summary, n, since := m.refusals.refused("failover_unchecked " + fo.Checked + " " + fo.Node)
		switch {
		case full:
			m.log.Error("lease acquire refused: the token floor was not checked on this database node (failover or restore?); run the floor check",
				"key", key.String(), "checked_node", fo.Checked, "node", fo.Node)
		case summary:
			m.log.Error("lease acquire still refused: token floor not checked on this database node",
				"refusals", n, "refused_since", since, "checked_node", fo.Checked, "node", fo.Node)
		}
	}
	return fmt.Errorf("lease: acquire %s: %w", key, refusal)
}
