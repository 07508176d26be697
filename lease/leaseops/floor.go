package leaseops

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/pgerr"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/internal/floorcheck"
	"github.com/fencekit/fencekit/sql/migrations"
)

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

// TokenFloor checks the token floor of one lease schema without moving the
// sequence (Check, after every failover or restore, and at startup) and
// reads its state (Status). CheckFloor is the recovery that moves it.
type TokenFloor struct {
	cfg TokenFloorConfig
	log *slog.Logger
}

// FloorReport is the token floor state of a lease schema: as a floor call
// left it (CheckFloor, TokenFloor.Check) or as TokenFloor.Status found it. Fields a call does not read are zero.
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
	// call ("" if never): Node when a check succeeded.
	CheckedNode string
	// CheckedBefore is the node the floor was recorded as checked on before
	// the call ("" if never). Set by CheckFloor and TokenFloor.Check.
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

// NewTokenFloor validates cfg and fills defaults. It does no I/O. Every
// error is a *fence.ConfigError (fence.ErrInvalidConfig).
func NewTokenFloor(cfg TokenFloorConfig) (*TokenFloor, error) {
	if cfg.Pool == nil {
		return nil, &fence.ConfigError{Source: "leaseops", Field: "Pool", Reason: "nil"}
	}
	if cfg.Source == nil {
		return nil, &fence.ConfigError{Source: "leaseops", Field: "Source", Reason: "nil (use StaticFloor(0) to check against the stored floor only)"}
	}
	if cfg.Schema == "" {
		cfg.Schema = migrations.DefaultSchema
	}
	if err := migrations.ValidateIdentifier(cfg.Schema); err != nil {
		return nil, &fence.ConfigError{Source: "leaseops", Field: "Schema", Reason: err.Error(), Err: err}
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = lease.DefaultCallTimeout
	}
	if cfg.CallTimeout < 0 {
		return nil, &fence.ConfigError{Source: "leaseops", Field: "CallTimeout", Reason: "negative: " + cfg.CallTimeout.String()}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &TokenFloor{cfg: cfg, log: log}, nil
}

// Check compares the token sequence with the floor, the larger of the
// Source's value and the floor stored in the schema, through the schema's
// floor check function (fencekit_check_floor without advance, lease
// migration 0010): in one statement it raises the stored floor to the
// Source's value (never lowering it) and, when the sequence's next value is
// above the floor, records the node it runs on as checked: grants refused
// with lease.ErrFailoverUnchecked on this node (after a promotion or
// restore) resume from then on. It never moves the sequence. When the
// sequence is not above the floor it returns the report and a
// *lease.TokenFloorError (matching lease.ErrTokenFloor), records no node,
// and grants stay refused (lease.ErrFailoverUnchecked on a new node,
// lease.ErrTokenFloor on a checked one) until CheckFloor moves the
// sequence.
//
// Call it at startup and after every restore or failover. It needs EXECUTE
// on fencekit_check_floor(bigint, bigint, boolean), which the schema owner
// has.
func (f *TokenFloor) Check(ctx context.Context) (FloorReport, error) {
	src, err := f.source(ctx)
	if err != nil {
		return FloorReport{}, err
	}
	res, err := floorcheck.Check(ctx, f.cfg.Pool, f.cfg.Schema, src, 0, false, f.cfg.CallTimeout)
	if err != nil {
		return FloorReport{Source: src}, fmt.Errorf("leaseops: check token floor: %w", err)
	}
	rep := FloorReport{
		Next: fence.Token(res.Next), Stored: fence.Token(res.Stored), Source: src,
		Node: res.Node, CheckedNode: res.Before, CheckedBefore: res.Before,
	}
	if !res.Checked {
		f.log.Warn("leaseops: token sequence is not above the token floor; acquisitions are refused until it is advanced",
			"next", int64(rep.Next), "floor", int64(rep.Floor()), "node", rep.Node)
		return rep, &lease.TokenFloorError{Token: rep.Next, Floor: rep.Floor()}
	}
	rep.CheckedNode = res.Node
	f.log.Info("leaseops: token floor checked", "next", int64(rep.Next), "floor", int64(rep.Floor()), "node", rep.Node)
	return rep, nil
}

func nextValue(last int64, called bool) fence.Token {
	if called {
		return fence.Token(last + 1)
	}
	return fence.Token(last)
}

func (f *TokenFloor) source(ctx context.Context) (fence.Token, error) {
	t, err := floorcheck.Read(ctx, f.cfg.Source, 0)
	if err != nil {
		return 0, fmt.Errorf("leaseops: token floor: %w", err)
	}
	return t, nil
}

func (f *TokenFloor) dbError(op string, err error) error {
	if pgerr.Is(err, pgerr.UndefinedTable, pgerr.UndefinedFunction) {
		return fmt.Errorf("leaseops: %s: schema %s lacks the token floor (apply migrations.Migrate with set migrations.Lease): %w", op, f.cfg.Schema, err)
	}
	return fmt.Errorf("leaseops: %s: %w", op, err)
}

// DB is what CheckFloor needs: *pgxpool.Pool, *pgx.Conn and pgx.Tx
// implement it.
type DB interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// CheckFloor runs the token floor check of the lease schema through its
// SECURITY DEFINER function fencekit_check_floor (lease migration 0008),
// against floor.Source: the same check, with the same FloorConfig, that a
// lease.Manager configured with lease.Config.Floor runs by itself. In one
// statement the function raises the stored floor to the source's value
// (never lowering it); if the token sequence's next value is not above the
// resulting floor, it takes LOCK TABLE fencekit_leases IN EXCLUSIVE MODE
// (which waits for every statement that may have drawn a token and holds
// new ones back) and moves the sequence past it; then it records the node
// it runs on as checked. floor.Gap adds a jump of the sequence on the first
// check after a node change. Grants refused with
// lease.ErrFailoverUnchecked or lease.ErrTokenFloor on that node resume at
// its commit, above every token the source knows. It never moves the floor
// or the sequence backwards. Lease statements of every process on the
// schema wait for the lock, when it is taken (one round trip).
//
// The role only needs EXECUTE on the function and USAGE on the schema (the
// function runs with its owner's rights): the application role can run it
// once granted (docs/operations.md, "Least-privilege role"). A check
// aborted for concurrency (a concurrent one raised the floor, SQLSTATE
// 40001) is retried twice. ctx bounds the call.
//
// Bad arguments return, as lease.New does for the same FloorConfig, a
// *fence.ConfigError (no floor.Source, a negative Gap, an invalid schema)
// or, for a nil db, an error matching fence.ErrNilArgument; a source that fails
// or returns a negative value returns its error. In both cases nothing is
// sent to the lease database and nothing changes. The report's Floor() and
// OK() read as Check's; on success OK() is true.
func CheckFloor(ctx context.Context, db DB, schema string, floor lease.FloorConfig) (FloorReport, error) {
	if db == nil {
		return FloorReport{}, fmt.Errorf("leaseops: check token floor: nil database: %w", fence.ErrNilArgument)
	}
	if floor.Source == nil {
		return FloorReport{}, &fence.ConfigError{Source: "leaseops", Field: "Floor.Source",
			Reason: "missing (lease.StaticFloor(0) checks against the stored floor only)"}
	}
	if p := floorcheck.Validate(floor.Source, floor.Gap); p != nil {
		return FloorReport{}, &fence.ConfigError{Source: "leaseops", Field: "Floor." + p.Field, Reason: p.Reason}
	}
	if schema == "" {
		schema = migrations.DefaultSchema
	}
	if err := migrations.ValidateIdentifier(schema); err != nil {
		return FloorReport{}, &fence.ConfigError{Source: "leaseops", Field: "schema", Reason: "not a valid identifier", Err: err}
	}
	v, err := floorcheck.Read(ctx, floor.Source, 0)
	if err != nil {
		return FloorReport{}, fmt.Errorf("leaseops: check token floor: %w", err)
	}
	res, err := floorcheck.Check(ctx, db, schema, v, floor.Gap, true, 0)
	if err != nil {
		return FloorReport{Source: v}, fmt.Errorf("leaseops: check token floor: %w", err)
	}
	return FloorReport{
		Next: fence.Token(res.Next), Stored: fence.Token(res.Stored), Source: v,
		Node: res.Node, CheckedNode: res.Node, CheckedBefore: res.Before,
		AdvancedFrom: fence.Token(res.AdvancedFrom),
	}, nil
}
