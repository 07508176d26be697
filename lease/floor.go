package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease/internal/floorcheck"
	"github.com/fencekit/fencekit/lease/internal/leasemetrics"
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
// Grants stay refused, for every process, until a floor check passes on the
// new node: the automatic one of a Manager configured with a floor source
// (Config.Floor), or the operator's (package leaseops).
var ErrFailoverUnchecked = errors.New("lease: token floor not checked since failover or restore")

// ErrFloorCheck is matched by the error of a failed automatic token floor
// check of a Manager (Config.Floor): a floor source that could not be read,
// or the check statement's error, which the error also wraps. The grant
// that triggered it stays refused: the error returned also matches
// ErrFailoverUnchecked or ErrTokenFloor. The next refused grant checks
// again.
var ErrFloorCheck = errors.New("lease: automatic token floor check failed")

// floorCheckError is a failed automatic floor check: it matches
// ErrFloorCheck and cause.
func floorCheckError(cause error) error { return fmt.Errorf("%w: %w", ErrFloorCheck, cause) }

// FloorSource returns a token floor: every token issued after a check
// against it is greater. Typical sources are the highest token a
// PostgreSQL guard has accepted (the method value pgguard.Marks.Highest,
// of marks in a database that survives the lease database's failover or
// restore) and a value kept by the operator outside the lease database
// (StaticFloor), combined with MaxFloor. An error or a negative value fails
// the check; nothing is recorded then.
type FloorSource func(ctx context.Context) (fence.Token, error)

// StaticFloor is a FloorSource of a fixed value, e.g. the highest token
// recorded by monitoring before a restore. StaticFloor(0) checks against
// the floor already stored in the schema only.
func StaticFloor(t fence.Token) FloorSource {
	return func(context.Context) (fence.Token, error) { return t, nil }
}

// MaxFloor is the largest floor of srcs (nil sources are skipped). Any
// source failing fails the whole: a floor that could not be read is never
// silently taken as 0.
func MaxFloor(srcs ...FloorSource) FloorSource {
	return func(ctx context.Context) (fence.Token, error) {
		var floor fence.Token
		for i, s := range srcs {
			if s == nil {
				continue
			}
			t, err := s(ctx)
			if err != nil {
				return 0, fmt.Errorf("lease: token floor source %d: %w", i, err)
			}
			if t < 0 {
				return 0, fmt.Errorf("lease: token floor source %d: negative floor %d", i, t)
			}
			floor = max(floor, t)
		}
		return floor, nil
	}
}

// FloorConfig names the token floor source and the node change gap of the
// floor check: the check a Manager runs by itself when a grant is refused
// (Config.Floor), and the one an operator runs (leaseops.CheckFloor, which
// takes a FloorConfig too). The check (lease migration 0008's SECURITY
// DEFINER function fencekit_check_floor, which the role must be granted
// EXECUTE on: docs/operations.md) raises the floor stored in the schema to
// the source's value, moves the token sequence past the stored floor when
// it is behind, and records the node as checked; grants on that node resume
// at its commit. A source that cannot be read fails the check and nothing
// is recorded.
//
// The zero value configures no source. The source must know every token a
// guard may have accepted: a floor below one lets the sequence re-issue it.
type FloorConfig struct {
	// Source is the floor: the PostgreSQL guard's marks
	// (pgguard.Marks.Highest) in a database that survives the lease
	// database's failover or restore (another cluster: marks kept in the
	// lease database are replicated and restored with it, so they are as
	// old as its sequence), an operator's value (StaticFloor), the highest
	// token of guards that are not PostgreSQL tables, or several of them
	// (MaxFloor). Each call is bounded by CallTimeout.
	Source FloorSource
	// Gap, when positive, makes the first check after a node change move
	// the token sequence forward by Gap (and the stored floor with it), past
	// the tokens the old node may have issued that this node never
	// received: grants lost by asynchronous replication, which no source
	// knows until their holders write. Set it above the number of grants
	// the lease database can lose in a failover (grant rate × the largest
	// replication lag a failover accepts, such as Patroni's
	// maximum_lag_on_failover). 0: the source alone sets the floor. Gap is
	// not a source: it needs Source.
	Gap fence.Token
}

// resolveFloor validates Config.Floor.
func (r *resolved) resolveFloor() error {
	if p := floorcheck.Validate(r.Floor.Source, r.Floor.Gap); p != nil {
		return configErr("Floor."+p.Field, p.Reason, nil)
	}
	return nil
}

// floorChecker runs a Manager's automatic token floor check: one at a time,
// callers refused meanwhile wait for the running check's outcome.
type floorChecker struct {
	src      FloorSource
	gap      fence.Token
	pool     *pgxpool.Pool
	schema   string
	timeout  time.Duration
	log      *slog.Logger
	mu       sync.Mutex
	inflight *floorRun
}

type floorRun struct {
	done chan struct{}
	err  error
}

// newFloorChecker returns nil when r configures no floor source.
func newFloorChecker(r resolved) *floorChecker {
	if r.Floor.Source == nil {
		return nil
	}
	return &floorChecker{src: r.Floor.Source, gap: r.Floor.Gap, pool: r.Pool, schema: r.Schema,
		timeout: r.CallTimeout, log: r.Logger}
}

// floorCheckAfter runs the automatic floor check when *errp is a grant
// refused by the floor or node gate and a floor source is configured. It
// reports whether the check passed, so that the grant is worth one more
// statement; when the check fails, *errp also matches ErrFloorCheck.
func (m *Manager) floorCheckAfter(ctx context.Context, errp *error) bool {
	if m.floor == nil || (!errors.Is(*errp, ErrFailoverUnchecked) && !errors.Is(*errp, ErrTokenFloor)) {
		return false
	}
	if err := m.floor.check(ctx); err != nil {
		*errp = fmt.Errorf("%w; %w", *errp, err)
		return false
	}
	return true
}

// check runs the check, or waits for the one running.
func (c *floorChecker) check(ctx context.Context) error {
	c.mu.Lock()
	if run := c.inflight; run != nil {
		c.mu.Unlock()
		select {
		case <-run.done:
			return run.err
		case <-ctx.Done():
			return floorCheckError(context.Cause(ctx))
		}
	}
	run := &floorRun{done: make(chan struct{})}
	c.inflight = run
	c.mu.Unlock()
	err := c.checkOnce(ctx)
	c.mu.Lock()
	c.inflight = nil
	c.mu.Unlock()
	run.err = err
	close(run.done)
	return err
}

func (c *floorChecker) checkOnce(ctx context.Context) error {
	src, err := floorcheck.Read(ctx, c.src, c.timeout)
	if err != nil {
		c.log.Error("lease: automatic token floor check failed: floor source unreadable; grants on this node stay refused", "err", err)
		return floorCheckError(err)
	}
	res, err := floorcheck.Check(ctx, c.pool, c.schema, src, c.gap, true, c.timeout)
	if err != nil {
		c.log.Error("lease: automatic token floor check failed; grants on this node stay refused", "source_floor", int64(src), "err", err)
		return floorCheckError(err)
	}
	c.log.Info("lease: token floor checked automatically; grants resume on this node",
		"node", res.Node, "checked_before", res.Before, "next", res.Next, "floor", res.Stored,
		"source_floor", int64(src), "advanced_from", res.AdvancedFrom)
	return nil
}

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
	return fmt.Sprintf("lease: token sequence behind the token floor: token %d is not above floor %d (advance the sequence with leaseops.CheckFloor or fencekit floor advance)", e.Token, e.Floor)
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
	if err == nil {
		return nil
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
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
		m.met.onRefused(ctx, leasemetrics.ReasonTokenFloor)
		full, summary, n, since := m.refusals.refused("token_floor")
		switch {
		case full:
			m.log.Error("lease acquire refused: the token sequence is not above the token floor (restore or failover?); advance it with leaseops.CheckFloor or fencekit floor advance",
				"key", key.String(), "token", int64(fe.Token), "floor", int64(fe.Floor))
		case summary:
			m.log.Error("lease acquire still refused: token sequence not above the token floor",
				"refusals", n, "refused_since", since, "token", int64(fe.Token), "floor", int64(fe.Floor))
		}
	case errors.As(refusal, &fo) && m.floor != nil:
		m.met.onRefused(ctx, leasemetrics.ReasonFailoverUnchecked)
		if full, _, _, _ := m.refusals.refused("failover_unchecked_auto " + fo.Checked + " " + fo.Node); full {
			m.log.Warn("lease acquire refused: the token floor was not checked on this database node (failover or restore?); checking it (Config.Floor)",
				"key", key.String(), "checked_node", fo.Checked, "node", fo.Node)
		}
	case errors.As(refusal, &fo):
		m.met.onRefused(ctx, leasemetrics.ReasonFailoverUnchecked)
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
