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

// FloorSource returns a token floor: every token issued from now on must be
// greater than it. Typical sources are the highest token a PostgreSQL guard
// has accepted (the method value pgguard.Marks.Highest) and a value kept by
// the operator outside the lease database (StaticFloor).
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
				return 0, fmt.Errorf("leaseops: token floor source %d: %w", i, err)
			}
			floor = max(floor, t)
		}
		return floor, nil
	}
}

// TokenFloorConfig configures a TokenFloor.
type TokenFloorConfig struct {
	// Pool is the lease database (required). Never closed by TokenFloor.
	Pool *pgxpool.Pool
	// Schema of the lease tables. Default "public".
	Schema string
	// Source supplies the floor (required): every token issued after a
	// successful check is above it. Use MaxFloor of the guards' marks
	// (pgguard.Marks.Highest, in a database that survives the lease
	// database's failover or restore) and an operator value; StaticFloor(0)
	// states explicitly that only the floor stored in the schema counts.
	Source FloorSource
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

// FloorReport is the token floor state after Check or Advance.
type FloorReport struct {
	// Next is the next value the token sequence will issue (last_value + 1
	// once a value has been drawn, last_value before).
	Next fence.Token
	// Stored is the floor kept in the schema's fencekit_token_floor table,
	// enforced by the database on every grant.
	Stored fence.Token
	// Source is what TokenFloorConfig.Source returned.
	Source fence.Token
	// Node is the database node the call ran on
	// ("<system identifier>:<database oid>/<timeline>").
	Node string
	// CheckedNode is the node the floor is recorded as checked on after the
	// call: Node when the call succeeded.
	CheckedNode string
	// CheckedBefore is the node the floor was recorded as checked on before
	// the call ("" if never). Set by CheckFloor only.
	CheckedBefore string
	// AdvancedFrom is the sequence's next value before CheckFloor moved it
	// past the floor; 0 when it was not moved. Set by CheckFloor only.
	AdvancedFrom fence.Token
}

// Floor is the larger of Stored and Source.
func (r FloorReport) Floor() fence.Token { return max(r.Stored, r.Source) }

// OK reports whether the next token is above the floor.
func (r FloorReport) OK() bool { return r.Next > r.Floor() }

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
	t, err := f.cfg.Source(ctx)
	if err != nil {
		return 0, fmt.Errorf("leaseops: token floor: %w", err)
	}
	if t < 0 {
		return 0, fmt.Errorf("leaseops: token floor: negative floor %d", t)
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

// CheckOption adjusts CheckFloor.
type CheckOption func(*checkOptions)

type checkOptions struct{ gap fence.Token }

// WithNodeChangeGap makes CheckFloor, when the node changed since the last
// check, move the token sequence forward by gap past its current value (as
// lease.FloorConfig.Gap does for a Manager's automatic check).
func WithNodeChangeGap(gap fence.Token) CheckOption {
	return func(o *checkOptions) { o.gap = gap }
}

// DB is what CheckFloor needs: *pgxpool.Pool, *pgx.Conn and pgx.Tx
// implement it.
type DB interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// CheckFloor runs the token floor check of the lease schema through its
// SECURITY DEFINER function fencekit_check_floor (lease migration 0008),
// with source's value as the floor; it is what a lease.Manager configured
// with lease.Config.Floor runs by itself. In one statement the function
// raises the stored floor to the source's value (never lowering it); if
// the token sequence's next value is not above the resulting floor, it
// takes LOCK TABLE fencekit_leases IN EXCLUSIVE MODE (as
// TokenFloor.Advance does) and moves the sequence past it; then it records
// the node it runs on as checked. WithNodeChangeGap adds a jump of the
// sequence on the first check after a node change. Grants refused with
// lease.ErrFailoverUnchecked or lease.ErrTokenFloor on that node resume at
// its commit, above every token the source knows. It never moves the floor
// or the sequence backwards.
//
// The role only needs EXECUTE on the function and USAGE on the schema (the
// function runs with its owner's rights): the application role can run it
// once granted (docs/operations.md, "Least-privilege role"). A check
// aborted because a concurrent one raised the floor (SQLSTATE 40001) is
// retried twice. ctx bounds the call.
//
// Bad arguments (nil db or source, an invalid schema) return an error
// matching ErrInvalidArgument; a source that fails or returns a negative
// value returns its error. In both cases nothing is sent to the lease
// database and nothing changes. The report's Floor() and OK() read as
// Check's; on success OK() is true.
func CheckFloor(ctx context.Context, db DB, schema string, source FloorSource, opts ...CheckOption) (FloorReport, error) {
	var o checkOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.gap < 0 {
		return FloorReport{}, fmt.Errorf("%w: check token floor: negative node change gap %d", ErrInvalidArgument, o.gap)
	}
	if db == nil {
		return FloorReport{}, fmt.Errorf("%w: check token floor: nil database", ErrInvalidArgument)
	}
	if source == nil {
		return FloorReport{}, fmt.Errorf("%w: check token floor: nil source (StaticFloor(0) checks against the stored floor only)", ErrInvalidArgument)
	}
	if schema == "" {
		schema = migrations.DefaultSchema
	}
	q, err := migrations.QuoteIdentifier(schema)
	if err != nil {
		return FloorReport{}, fmt.Errorf("%w: check token floor: schema: %w", ErrInvalidArgument, err)
	}
	src, err := source(ctx)
	if err != nil {
		return FloorReport{}, fmt.Errorf("leaseops: check token floor: source: %w", err)
	}
	if src < 0 {
		return FloorReport{}, fmt.Errorf("leaseops: check token floor: source returned a negative floor %d", src)
	}
	stmt := floorcheck.Statement(q)
	var res floorcheck.Result
	for attempt := 1; ; attempt++ {
		res, err = floorcheck.Run(ctx, db, stmt, int64(src), int64(o.gap))
		if err == nil || attempt == 3 || !isSerializationFailure(err) {
			break
		}
	}
	if err != nil {
		return FloorReport{Source: src}, fmt.Errorf("leaseops: check token floor: %w", floorcheck.Explain(err, schema))
	}
	return FloorReport{
		Next: fence.Token(res.Next), Stored: fence.Token(res.Stored), Source: src,
		Node: res.Node, CheckedNode: res.Node, CheckedBefore: res.Before,
		AdvancedFrom: fence.Token(res.AdvancedFrom),
	}, nil
}

func isSerializationFailure(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}
