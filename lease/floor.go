package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/sql/migrations"
)

// ErrTokenFloor is matched by *TokenFloorError: the token sequence is not
// above the token floor, typically after a database restore or a failover
// to a replica that had not received the latest grants. Tokens at or below
// the floor would be refused by the guards (below) or, worse, re-issue a
// token a guard has already accepted from another run (equal).
var ErrTokenFloor = errors.New("lease: token sequence not above the token floor")

// TokenFloorError reports a sequence that is not above the floor. It
// matches ErrTokenFloor.
type TokenFloorError struct {
	// Token is the value the database drew and refused (from Acquire), or
	// the next value the sequence would issue (from CheckTokenFloor).
	Token fence.Token
	// Floor is the floor the token must exceed.
	Floor fence.Token
}

func (e *TokenFloorError) Error() string {
	return fmt.Sprintf("lease: token sequence behind the token floor: token %d is not above floor %d (advance it with Manager.AdvanceTokenSequence)", e.Token, e.Floor)
}

// Is reports whether target is ErrTokenFloor.
func (e *TokenFloorError) Is(target error) bool { return target == ErrTokenFloor }

// floorSQLState is raised by migration 0002's trigger.
const floorSQLState = "FK001"

// floorError returns the *TokenFloorError that err carries, if any.
func floorError(err error) *TokenFloorError {
	var fe *TokenFloorError
	if errors.As(err, &fe) {
		return fe
	}
	var pe *pgconn.PgError
	if err == nil || !errors.As(err, &pe) || pe.Code != floorSQLState {
		return nil
	}
	fe = &TokenFloorError{}
	var t, f int64
	if _, serr := fmt.Sscanf(pe.Detail, "token=%d floor=%d", &t, &f); serr == nil {
		fe.Token, fe.Floor = fence.Token(t), fence.Token(f)
	}
	return fe
}

// FloorSource returns a token floor: every token issued from now on must be
// greater than it. Typical sources are the highest token a PostgreSQL guard
// has accepted (GuardMarks.Highest) and a value kept by the operator outside
// the lease database (StaticFloor).
type FloorSource func(ctx context.Context) (fence.Token, error)

// StaticFloor is a FloorSource of a fixed value, e.g. the highest token
// recorded by monitoring before a restore.
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
			floor = max(floor, t)
		}
		return floor, nil
	}
}

// FloorReport is the token floor state after CheckTokenFloor or
// AdvanceTokenSequence.
type FloorReport struct {
	// Next is the next value the token sequence will issue (last_value + 1
	// once a value has been drawn, last_value before).
	Next fence.Token
	// Stored is the floor kept in the schema's fencekit_token_floor table,
	// enforced by the database on every grant.
	Stored fence.Token
	// Source is what Config.TokenFloor returned (0 without one).
	Source fence.Token
}

// Floor is the larger of Stored and Source.
func (r FloorReport) Floor() fence.Token { return max(r.Stored, r.Source) }

// OK reports whether the next token is above the floor.
func (r FloorReport) OK() bool { return r.Next > r.Floor() }

func (m *Manager) sourceFloor(ctx context.Context) (fence.Token, error) {
	if m.cfg.TokenFloor == nil {
		return 0, nil
	}
	t, err := m.cfg.TokenFloor(ctx)
	if err != nil {
		return 0, fmt.Errorf("lease: token floor: %w", err)
	}
	if t < 0 {
		return 0, fmt.Errorf("lease: token floor: negative floor %d", t)
	}
	return t, nil
}

// CheckTokenFloor compares the token sequence with the floor: the larger of
// Config.TokenFloor and the floor stored in the schema. It first raises the
// stored floor to Config.TokenFloor's value (never lowering it), so that
// from then on the database refuses every grant whose token is not above
// it — for every Manager on this schema, checked or not. When the
// sequence's next value is not above the floor it returns the report and a
// *TokenFloorError (matching ErrTokenFloor); acquisitions then fail with
// ErrTokenFloor until AdvanceTokenSequence moves the sequence on.
//
// Call it at startup and after every restore or failover. It needs SELECT
// on the sequence and SELECT, UPDATE on fencekit_token_floor (migration
// 0002 of migrations.Lease).
func (m *Manager) CheckTokenFloor(ctx context.Context) (FloorReport, error) {
	if m.isClosed() {
		return FloorReport{}, ErrClosed
	}
	src, err := m.sourceFloor(ctx)
	if err != nil {
		return FloorReport{}, err
	}
	cctx, cancel := m.call(ctx)
	defer cancel()
	rep := FloorReport{Source: src}
	var (
		stored, last int64
		called       bool
	)
	err = m.pool.QueryRow(cctx, m.st.checkFloor, int64(src)).Scan(&stored, &last, &called)
	if err != nil {
		return rep, m.floorDBError("check token floor", err)
	}
	rep.Stored, rep.Next = fence.Token(stored), nextValue(last, called)
	if !rep.OK() {
		m.log.Warn("lease: token sequence is not above the token floor; acquisitions are refused until it is advanced",
			"next", int64(rep.Next), "floor", int64(rep.Floor()))
		return rep, &TokenFloorError{Token: rep.Next, Floor: rep.Floor()}
	}
	m.log.Debug("lease: token floor checked", "next", int64(rep.Next), "floor", int64(rep.Floor()))
	return rep, nil
}

func nextValue(last int64, called bool) fence.Token {
	if called {
		return fence.Token(last + 1)
	}
	return fence.Token(last)
}

// AdvanceTokenSequence raises the stored floor to the largest of floor,
// Config.TokenFloor and the stored floor, and moves the token sequence
// forward so that its next value is above that floor. It never moves the
// sequence or the floor backwards, and is safe to run concurrently with
// itself and with lease traffic: in one transaction it takes
// LOCK TABLE fencekit_leases IN EXCLUSIVE MODE, which waits for every
// statement that may have drawn a token (every statement that calls
// nextval on the sequence also writes fencekit_leases) and holds new ones
// back, then reads the sequence and calls setval only when it is behind.
// Lease statements of every process on the schema wait for the duration
// (one round trip plus the lock wait, bounded by CallTimeout), so renewals
// are delayed by as much.
//
// It needs the schema owner's rights (or UPDATE on fencekit_leases,
// fencekit_token_floor and the sequence): run it as an operator action.
// Sequences called with nextval outside fencekit's statements are not
// covered by the lock.
func (m *Manager) AdvanceTokenSequence(ctx context.Context, floor fence.Token) (FloorReport, error) {
	if floor < 0 {
		return FloorReport{}, fmt.Errorf("%w: advance token sequence: negative floor %d", ErrInvalidArgument, floor)
	}
	if m.isClosed() {
		return FloorReport{}, ErrClosed
	}
	src, err := m.sourceFloor(ctx)
	if err != nil {
		return FloorReport{}, err
	}
	target := max(floor, src)
	cctx, cancel := m.call(ctx)
	defer cancel()
	rep := FloorReport{Source: src}
	var before fence.Token
	err = pgx.BeginFunc(cctx, m.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(cctx, m.st.lockLeases); err != nil {
			return err
		}
		var stored, last int64
		var called bool
		if err := tx.QueryRow(cctx, m.st.checkFloor, int64(target)).Scan(&stored, &last, &called); err != nil {
			return err
		}
		rep.Stored, rep.Next = fence.Token(stored), nextValue(last, called)
		before = rep.Next
		if rep.Next <= rep.Floor() {
			// setval(seq, f, true): the next nextval returns f + 1.
			if err := tx.QueryRow(cctx, m.st.setSeq, int64(rep.Floor())).Scan(&last); err != nil {
				return err
			}
			rep.Next = fence.Token(last + 1)
		}
		return nil
	})
	if err != nil {
		return rep, m.floorDBError("advance token sequence", err)
	}
	m.log.Info("lease: token sequence advanced", "from_next", int64(before), "next", int64(rep.Next), "floor", int64(rep.Floor()))
	return rep, nil
}

func (m *Manager) floorDBError(op string, err error) error {
	if migrations.IsUndefinedTable(err) {
		return fmt.Errorf("lease: %s: table %s.fencekit_token_floor missing (apply migrations.Migrate with set migrations.Lease): %w", op, m.cfg.Schema, err)
	}
	return fmt.Errorf("lease: %s: %w", op, err)
}

// floorStatements are the token floor's statements for one schema.
func floorStatements(r *strings.Replacer) (checkFloor, lockLeases, setSeq string) {
	// $1 floor to raise the stored one to (GREATEST: never lowered).
	checkFloor = r.Replace(`WITH f AS (
  UPDATE $S.fencekit_token_floor
     SET floor = GREATEST(floor, $1::bigint),
         updated_at = CASE WHEN $1::bigint > floor THEN clock_timestamp() ELSE updated_at END
   WHERE id
  RETURNING floor)
SELECT coalesce((SELECT floor FROM f), 0), s.last_value, s.is_called FROM $S.fencekit_token_seq s`)
	lockLeases = r.Replace(`LOCK TABLE $S.fencekit_leases IN EXCLUSIVE MODE`)
	// $1 the value the sequence is set to (is_called: next is $1 + 1).
	// Runs only after reading, under the lock, that the sequence is behind.
	setSeq = r.Replace(`SELECT setval('$S.fencekit_token_seq', $1::bigint, true)`)
	return checkFloor, lockLeases, setSeq
}
