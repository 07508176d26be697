package leaseops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/internal/floorcheck"
	"github.com/fencekit/fencekit/sql/migrations"
)

// ErrInvalidArgument is matched by errors for bad arguments of the
// operator calls (TokenFloor.Advance). Nothing changed.
var ErrInvalidArgument = errors.New("leaseops: invalid argument")

// ConfigError describes an invalid config field. It matches
// lease.ErrInvalidConfig.
type ConfigError struct {
	Field  string
	Reason string
	Err    error // underlying cause, if any
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("leaseops: invalid config %s: %s", e.Field, e.Reason)
}

// Is reports whether target is lease.ErrInvalidConfig.
func (e *ConfigError) Is(target error) bool { return target == lease.ErrInvalidConfig }

// Unwrap returns the underlying cause.
func (e *ConfigError) Unwrap() error { return e.Err }

// TokenFloorConfig configures a TokenFloor.
type TokenFloorConfig struct {
	// Pool is the lease database (required). Never closed by TokenFloor.
	Pool *pgxpool.Pool
	// Schema of the lease tables. Default "public".
	Schema string
	// Source supplies the floor (required): every token issued after a
	// successful check is above it. Use lease.MaxFloor of the guards' marks
	// (pgguard.Marks.Highest, in a database that survives the lease
	// database's failover or restore) and an operator value;
	// lease.StaticFloor(0) states explicitly that only the floor stored in
	// the schema counts.
	Source lease.FloorSource
	// CallTimeout bounds each call's statements. Default
	// lease.DefaultCallTimeout.
	CallTimeout time.Duration
	// Logger receives Info logs of advances, Warn logs of failed checks.
	// Nil discards them.
	Logger *slog.Logger
}

// TokenFloor runs the token floor procedures of one lease schema: Check
// (after every failover or restore, and at startup) and Advance.
type TokenFloor struct {
	cfg                                      TokenFloorConfig
	log                                      *slog.Logger
	checkSQL, lockSQL, setSeqSQL, approveSQL string
}

// FloorReport is the token floor state of a lease schema: as a floor call
// left it (CheckFloor, TokenFloor.Check, TokenFloor.Advance) or as
// TokenFloor.Status found it. Fields a call does not read are zero.
type FloorReport struct {
	// Next is the next value the token sequence will issue (last_value + 1
	// once a value has been drawn, last_value before).
	Next fence.Token
	// Stored is the floor kept in the schema's fencekit_token_floor table,
	// enforced by the database on every grant.
	Stored fence.Token
	// UpdatedAt is when Stored was last raised (database clock). Set by
	// Status only.
	UpdatedAt time.Time
	// Source is the floor the sources returned (0 from Status, which reads
	// none).
	Source fence.Token
	// Node is the database node the call ran on
	// ("<system identifier>:<database oid>/<timeline>"); "" on a standby
	// (Status), which has no timeline of its own to write on yet.
	Node string
	// CheckedNode is the node the floor is recorded as checked on after the
	// call ("" if never): Node when a check or advance succeeded.
	CheckedNode string
	// CheckedBefore is the node the floor was recorded as checked on before
	// the call ("" if never). Set by CheckFloor only.
	CheckedBefore string
	// AdvancedFrom is the sequence's next value before CheckFloor moved it
	// past the floor; 0 when it was not moved. Set by CheckFloor only.
	AdvancedFrom fence.Token
	// InRecovery is true on a standby. Set by Status only.
	InRecovery bool
}

// Floor is the larger of Stored and Source.
func (r FloorReport) Floor() fence.Token { return max(r.Stored, r.Source) }

// OK reports whether the next token is above the floor.
func (r FloorReport) OK() bool { return r.Next > r.Floor() }

// Refused returns why grants on the node are refused, or nil: ErrStandby
// in recovery, a *lease.FailoverError (lease.ErrFailoverUnchecked) when
// the floor was last checked on another node, a *lease.TokenFloorError
// (lease.ErrTokenFloor) when the sequence is not above the stored floor.
// These are the refusals the acquire statement raises, in its order.
func (r FloorReport) Refused() error {
	switch {
	case r.InRecovery:
		return ErrStandby
	case r.CheckedNode != r.Node:
		return &lease.FailoverError{Checked: r.CheckedNode, Node: r.Node}
	case r.Next <= r.Stored:
		return &lease.TokenFloorError{Token: r.Next, Floor: r.Stored}
	}
	return nil
}

// NewTokenFloor validates cfg and fills defaults. It does no I/O.
func NewTokenFloor(cfg TokenFloorConfig) (*TokenFloor, error) {
	if cfg.Pool == nil {
		return nil, &ConfigError{Field: "Pool", Reason: "nil"}
	}
	if cfg.Source == nil {
		return nil, &ConfigError{Field: "Source", Reason: "nil (use StaticFloor(0) to check against the stored floor only)"}
	}
	if cfg.Schema == "" {
		cfg.Schema = migrations.DefaultSchema
	}
	q, err := migrations.QuoteIdentifier(cfg.Schema)
	if err != nil {
		return nil, &ConfigError{Field: "Schema", Reason: err.Error(), Err: err}
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = lease.DefaultCallTimeout
	}
	if cfg.CallTimeout < 0 {
		return nil, &ConfigError{Field: "CallTimeout", Reason: "negative: " + cfg.CallTimeout.String()}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	r := strings.NewReplacer("$S", q)
	return &TokenFloor{
		cfg: cfg, log: log,
		// $1 floor to raise the stored one to (GREATEST: never lowered).
		// When the sequence's next value is above the resulting floor, the
		// node is recorded as checked, in the same statement: grants on this
		// node resume at its commit.
		checkSQL: r.Replace(`WITH s AS (SELECT last_value, is_called,
    CASE WHEN is_called THEN last_value + 1 ELSE last_value END AS next FROM $S.fencekit_token_seq),
node AS MATERIALIZED (SELECT $S.fencekit_node() AS n),
f AS (
  UPDATE $S.fencekit_token_floor t
     SET floor = GREATEST(t.floor, $1::bigint),
         updated_at = CASE WHEN $1::bigint > t.floor THEN clock_timestamp() ELSE t.updated_at END,
         checked_node = CASE WHEN s.next > GREATEST(t.floor, $1::bigint) THEN node.n ELSE t.checked_node END
    FROM s, node
   WHERE t.id
  RETURNING t.floor, t.checked_node)
SELECT coalesce((SELECT floor FROM f), 0), s.last_value, s.is_called, node.n, coalesce((SELECT checked_node FROM f), '')
  FROM s, node`),
		lockSQL: r.Replace(`LOCK TABLE $S.fencekit_leases IN EXCLUSIVE MODE`),
		// $1 the value the sequence is set to (is_called: next is $1 + 1).
		// Runs only after reading, under the lock, that the sequence is behind.
		setSeqSQL: r.Replace(`SELECT setval('$S.fencekit_token_seq', $1::bigint, true)`),
		// Records the node as checked after setSeqSQL moved the sequence past
		// the floor (under the same lock).
		approveSQL: r.Replace(`UPDATE $S.fencekit_token_floor SET checked_node = $S.fencekit_node() WHERE id RETURNING checked_node`),
	}, nil
}

// Check compares the token sequence with the floor: the larger of the
// Source's value and the floor stored in the schema. In one statement it
// raises the stored floor to the Source's value (never lowering it) and,
// when the sequence's next value is above the floor, records the node it
// runs on as checked: grants refused with lease.ErrFailoverUnchecked on
// this node (after a promotion or restore) resume from then on. When the
// sequence is not above the floor it returns the report and a
// *lease.TokenFloorError (matching lease.ErrTokenFloor), records nothing,
// and grants stay refused (lease.ErrFailoverUnchecked on a new node,
// lease.ErrTokenFloor on a checked one) until Advance.
//
// Call it at startup and after every restore or failover. It needs SELECT
// on the sequence and SELECT, UPDATE on fencekit_token_floor.
func (f *TokenFloor) Check(ctx context.Context) (FloorReport, error) {
	src, err := f.source(ctx)
	if err != nil {
		return FloorReport{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, f.cfg.CallTimeout)
	defer cancel()
	rep := FloorReport{Source: src}
	if err := f.check(cctx, f.cfg.Pool, src, &rep); err != nil {
		return rep, f.dbError("check token floor", err)
	}
	if !rep.OK() {
		f.log.Warn("leaseops: token sequence is not above the token floor; acquisitions are refused until it is advanced",
			"next", int64(rep.Next), "floor", int64(rep.Floor()), "node", rep.Node)
		return rep, &lease.TokenFloorError{Token: rep.Next, Floor: rep.Floor()}
	}
	f.log.Info("leaseops: token floor checked", "next", int64(rep.Next), "floor", int64(rep.Floor()), "node", rep.Node)
	return rep, nil
}

type queryer interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func (f *TokenFloor) check(ctx context.Context, db queryer, floor fence.Token, rep *FloorReport) error {
	var (
		stored, last int64
		called       bool
	)
	if err := db.QueryRow(ctx, f.checkSQL, int64(floor)).Scan(&stored, &last, &called, &rep.Node, &rep.CheckedNode); err != nil {
		return err
	}
	rep.Stored, rep.Next = fence.Token(stored), nextValue(last, called)
	return nil
}

func nextValue(last int64, called bool) fence.Token {
	if called {
		return fence.Token(last + 1)
	}
	return fence.Token(last)
}

// Advance raises the stored floor to the largest of floor, the Source's
// value and the stored floor, moves the token sequence forward so that its
// next value is above that floor, and records the node as checked. It
// never moves the sequence or the floor backwards, and is safe to run
// concurrently with itself and with lease traffic: in one transaction it
// takes LOCK TABLE fencekit_leases IN EXCLUSIVE MODE, which waits for every
// statement that may have drawn a token (every statement that calls nextval
// on the sequence also writes fencekit_leases) and holds new ones back,
// then reads the sequence and calls setval only when it is behind. Lease
// statements of every process on the schema wait for the duration (one
// round trip plus the lock wait, bounded by CallTimeout).
//
// It needs the schema owner's rights (or UPDATE on fencekit_leases,
// fencekit_token_floor and the sequence): run it as an operator action.
// Sequences called with nextval outside fencekit's statements are not
// covered by the lock.
func (f *TokenFloor) Advance(ctx context.Context, floor fence.Token) (FloorReport, error) {
	if floor < 0 {
		return FloorReport{}, fmt.Errorf("%w: advance token sequence: negative floor %d", ErrInvalidArgument, floor)
	}
	src, err := f.source(ctx)
	if err != nil {
		return FloorReport{}, err
	}
	target := max(floor, src)
	cctx, cancel := context.WithTimeout(ctx, f.cfg.CallTimeout)
	defer cancel()
	rep := FloorReport{Source: src}
	var before fence.Token
	err = pgx.BeginFunc(cctx, f.cfg.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(cctx, f.lockSQL); err != nil {
			return err
		}
		if err := f.check(cctx, tx, target, &rep); err != nil {
			return err
		}
		before = rep.Next
		if rep.Next > max(rep.Floor(), target) {
			return nil // the check recorded the node
		}
		// setval(seq, f, true): the next nextval returns f + 1.
		var last int64
		if err := tx.QueryRow(cctx, f.setSeqSQL, int64(max(rep.Floor(), target))).Scan(&last); err != nil {
			return err
		}
		rep.Next = fence.Token(last + 1)
		return tx.QueryRow(cctx, f.approveSQL).Scan(&rep.CheckedNode)
	})
	if err != nil {
		return rep, f.dbError("advance token sequence", err)
	}
	f.log.Info("leaseops: token sequence advanced", "from_next", int64(before), "next", int64(rep.Next),
		"floor", int64(rep.Floor()), "node", rep.Node)
	return rep, nil
}

func (f *TokenFloor) source(ctx context.Context) (fence.Token, error) {
	t, err := floorcheck.Sources{Source: f.cfg.Source}.Read(ctx, 0)
	if err != nil {
		return 0, fmt.Errorf("leaseops: token floor: %w", err)
	}
	return t, nil
}

func (f *TokenFloor) dbError(op string, err error) error {
	if migrations.IsUndefinedTable(err) || isUndefinedFunction(err) {
		return fmt.Errorf("leaseops: %s: schema %s lacks the token floor (apply migrations.Migrate with set migrations.Lease): %w", op, f.cfg.Schema, err)
	}
	return fmt.Errorf("leaseops: %s: %w", op, err)
}

func isUndefinedFunction(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42883"
}

// DB is what CheckFloor needs: *pgxpool.Pool, *pgx.Conn and pgx.Tx
// implement it.
type DB interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// CheckFloor runs the token floor check of the lease schema through its
// SECURITY DEFINER function fencekit_check_floor (lease migration 0008),
// against the sources of floor: the same check, with the same FloorConfig,
// that a lease.Manager configured with lease.Config.Floor runs by itself.
// In one statement the function raises the stored floor to the sources'
// value (never lowering it); if the token sequence's next value is not
// above the resulting floor, it takes LOCK TABLE fencekit_leases IN
// EXCLUSIVE MODE (as TokenFloor.Advance does) and moves the sequence past
// it; then it records the node it runs on as checked. floor.Gap adds a
// jump of the sequence on the first check after a node change. Grants
// refused with lease.ErrFailoverUnchecked or lease.ErrTokenFloor on that
// node resume at its commit, above every token the sources know. It never
// moves the floor or the sequence backwards.
//
// The role only needs EXECUTE on the function and USAGE on the schema (the
// function runs with its owner's rights): the application role can run it
// once granted (docs/operations.md, "Least-privilege role"). A check
// aborted for concurrency (a concurrent one raised the floor, SQLSTATE
// 40001) is retried twice. ctx bounds the call.
//
// Bad arguments (a nil db, a floor without a source, a negative Gap,
// floor.Marks being db, an invalid schema) return an error matching
// ErrInvalidArgument; a source that fails or returns a negative value
// returns its error. In both cases nothing is sent to the lease database
// and nothing changes. The report's Floor() and OK() read as Check's; on
// success OK() is true.
func CheckFloor(ctx context.Context, db DB, schema string, floor lease.FloorConfig) (FloorReport, error) {
	if db == nil {
		return FloorReport{}, fmt.Errorf("%w: check token floor: nil database", ErrInvalidArgument)
	}
	src := floorcheck.Sources{Marks: floor.Marks, MarksSchema: floor.MarksSchema, Source: floor.Source}
	if !src.Configured() {
		return FloorReport{}, fmt.Errorf("%w: check token floor: no floor source (Source: lease.StaticFloor(0) checks against the stored floor only)", ErrInvalidArgument)
	}
	marksSchema, p := floorcheck.Validate(src, floor.Gap, db)
	if p != nil {
		return FloorReport{}, fmt.Errorf("%w: check token floor: %s: %s", ErrInvalidArgument, p.Field, p.Reason)
	}
	src.MarksSchema = marksSchema
	if schema == "" {
		schema = migrations.DefaultSchema
	}
	if err := migrations.ValidateIdentifier(schema); err != nil {
		return FloorReport{}, fmt.Errorf("%w: check token floor: schema: %w", ErrInvalidArgument, err)
	}
	v, err := src.Read(ctx, 0)
	if err != nil {
		return FloorReport{}, fmt.Errorf("leaseops: check token floor: %w", err)
	}
	res, err := floorcheck.Check(ctx, db, schema, v, floor.Gap, 0)
	if err != nil {
		return FloorReport{Source: v}, fmt.Errorf("leaseops: check token floor: %w", err)
	}
	return FloorReport{
		Next: fence.Token(res.Next), Stored: fence.Token(res.Stored), Source: v,
		Node: res.Node, CheckedNode: res.Node, CheckedBefore: res.Before,
		AdvancedFrom: fence.Token(res.AdvancedFrom),
	}, nil
}
