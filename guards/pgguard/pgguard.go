package pgguard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/metric"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/obs"
	"github.com/fencekit/fencekit/sql/migrations"
)

// DB is what a Guard needs to open its own transactions (Fence) and read
// marks (Mark). *pgxpool.Pool and *pgx.Conn implement it.
type DB interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Batcher sends a pgx.Batch; *pgxpool.Pool and *pgx.Conn implement it. A DB
// that also implements Batcher lets Guard.Fence begin its transaction and
// fence in one round trip (see BeginFenced).
type Batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Config configures a Guard.
type Config struct {
	// DB opens the transactions of Fence and serves Mark. It may be nil when
	// only FenceTx is used; Fence and Mark then return ErrNoDB.
	DB DB
	// Schema holds the fencekit_guard_marks table (created by
	// migrations.Migrate(..., migrations.Guard)). It must pass migrations.ValidateIdentifier.
	// Default "public".
	Schema string
	// IsoLevel is the isolation level of the transactions Fence opens:
	// pgx.ReadCommitted (the default), pgx.RepeatableRead or
	// pgx.Serializable. It does not affect FenceTx, which runs in whatever
	// transaction the caller opened.
	IsoLevel pgx.TxIsoLevel
	// LockTimeout bounds how long a Fence transaction waits for a mark's row
	// lock held by another transaction (SET LOCAL lock_timeout, sent with
	// BEGIN in the same round trip). A timeout yields an error matching
	// fence.ErrBusy. Default 5s; negative leaves the server's setting.
	// Positive values must be at least a millisecond.
	LockTimeout time.Duration
	// MeterProvider records fencekit.guard.accepted (fence statements that
	// admitted the token; the caller's transaction may still roll back),
	// fencekit.guard.stale and fencekit.guard.token_gap with
	// guard="postgres" (see docs/operations.md). Nil records nothing.
	MeterProvider metric.MeterProvider
}

// DefaultLockTimeout is Config.LockTimeout's default.
const DefaultLockTimeout = 5 * time.Second

// MarksTable is the name of the high-water-mark table inside Config.Schema.
const MarksTable = "fencekit_guard_marks"

// ErrInvalidConfig is matched by every error New returns.
var ErrInvalidConfig = errors.New("pgguard: invalid config")

// ErrNoDB is returned by Fence and Mark of a Guard built without Config.DB.
var ErrNoDB = errors.New("pgguard: Config.DB is nil; only FenceTx is available")

// ErrNilArgument is returned for a nil transaction or write function.
var ErrNilArgument = errors.New("pgguard: nil argument")

// Guard fences PostgreSQL writes with the high-water marks in
// Config.Schema's fencekit_guard_marks table. It is safe for concurrent use.
type Guard struct {
	db       DB
	schema   string
	txOpts   pgx.TxOptions
	iso      pgx.TxIsoLevel
	lockMs   int64 // 0: leave the server's lock_timeout
	fenceSQL string
	readSQL  string
	met      *obs.Guard
}

var _ fence.Guard = (*Guard)(nil)

// New validates cfg, fills defaults and returns a Guard. It does no I/O.
func New(cfg Config) (*Guard, error) {
	if cfg.Schema == "" {
		cfg.Schema = migrations.DefaultSchema
	}
	schema, err := migrations.QuoteIdentifier(cfg.Schema)
	if err != nil {
		return nil, fmt.Errorf("%w: Schema: %w", ErrInvalidConfig, err)
	}
	switch cfg.IsoLevel {
	case "":
		cfg.IsoLevel = pgx.ReadCommitted
	case pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable:
	default:
		return nil, fmt.Errorf("%w: IsoLevel %q (want read committed, repeatable read or serializable)", ErrInvalidConfig, cfg.IsoLevel)
	}
	if cfg.LockTimeout == 0 {
		cfg.LockTimeout = DefaultLockTimeout
	}
	if cfg.LockTimeout > 0 && cfg.LockTimeout < time.Millisecond {
		return nil, fmt.Errorf("%w: LockTimeout %v below 1ms (PostgreSQL would read it as 0, no timeout)", ErrInvalidConfig, cfg.LockTimeout)
	}
	begin := "BEGIN ISOLATION LEVEL " + string(cfg.IsoLevel)
	if cfg.LockTimeout > 0 {
		begin += fmt.Sprintf("; SET LOCAL lock_timeout = %d", cfg.LockTimeout.Milliseconds())
	}
	table := schema + "." + MarksTable
	var lockMs int64
	if cfg.LockTimeout > 0 {
		lockMs = cfg.LockTimeout.Milliseconds()
	}
	met, err := obs.NewGuard(cfg.MeterProvider, obs.KindPostgres)
	if err != nil {
		return nil, fmt.Errorf("%w: MeterProvider: %w", ErrInvalidConfig, err)
	}
	return &Guard{
		met:    met,
		db:     cfg.DB,
		schema: cfg.Schema,
		txOpts: pgx.TxOptions{IsoLevel: cfg.IsoLevel, BeginQuery: begin},
		iso:    cfg.IsoLevel,
		lockMs: lockMs,
		// One statement. The upsert takes (and keeps until the end of the
		// transaction) the mark's row lock, so concurrent holders serialise.
		// On conflict it operates on the latest committed row version even
		// when this statement's snapshot cannot see it, so RETURNING yields
		// the exact mark after the decision: equal to the token when
		// admitted, the higher mark when refused (the refused update
		// rewrites the same value and is rolled back with the transaction).
		fenceSQL: `INSERT INTO ` + table + ` AS m (resource, highest_token)
VALUES ($1, $2)
ON CONFLICT (resource) DO UPDATE
    SET highest_token = GREATEST(m.highest_token, EXCLUDED.highest_token),
        updated_at = CASE WHEN m.highest_token <= EXCLUDED.highest_token
                          THEN clock_timestamp() ELSE m.updated_at END
RETURNING m.highest_token`,
		readSQL: `SELECT highest_token FROM ` + table + ` WHERE resource = $1`,
	}, nil
}

// Schema returns the schema the Guard's marks table lives in.
func (g *Guard) Schema() string { return g.schema }

// FenceTx enforces token for resource inside the caller's transaction tx,
// with one SQL statement (one round trip) on every path: if token is at least the resource's mark, the mark
// is raised to token (or created) and FenceTx returns nil; the write that
// follows in tx and the raised mark then commit or roll back together, and
// the mark's row stays locked until tx ends, so a concurrent holder of the
// same resource waits for tx's outcome.
//
// Errors:
//   - invalid resource or token (fence.ErrInvalidResource,
//     fence.ErrInvalidToken), nil tx (ErrNilArgument): returned before any
//     I/O; tx is left as it was.
//   - a lower token: a *fence.StaleError carrying the exact current mark,
//     from the same statement (also when the mark was committed by a
//     concurrent transaction this statement waited for).
//   - lock_timeout (55P03), serialization failure (40001) and deadlock
//     (40P01): an error matching fence.ErrBusy (and wrapping the
//     *pgconn.PgError). Retry the whole transaction. ctx ending before the
//     statement returned (a bounded lock wait) also matches fence.ErrBusy,
//     as well as ctx.Err().
//   - anything else: wrapped as is.
//
// After any error except the input errors, FenceTx has rolled tx back (for
// database errors PostgreSQL has aborted it already), so work done earlier in
// tx can never be committed without the token check. tx must be the
// outermost transaction: rolling back a pgx savepoint transaction does not
// undo its parent's work.
func (g *Guard) FenceTx(ctx context.Context, tx pgx.Tx, resource string, token fence.Token) error {
	if err := fence.CheckArgs(resource, token); err != nil {
		return err
	}
	if tx == nil {
		return fmt.Errorf("%w: FenceTx with nil tx", ErrNilArgument)
	}
	err := g.fenceTx(ctx, tx, resource, token)
	if err != nil {
		rollback(ctx, tx)
	}
	return err
}

func (g *Guard) fenceTx(ctx context.Context, tx pgx.Tx, resource string, token fence.Token) error {
	var mark int64
	if err := tx.QueryRow(ctx, g.fenceSQL, resource, int64(token)).Scan(&mark); err != nil {
		return g.dbError(resource, "fence", err)
	}
	err := decide(resource, token, mark)
	g.met.Decision(ctx, err)
	return err
}

// decide turns the mark returned by the fence statement into FenceTx's
// outcome.
func decide(resource string, token fence.Token, mark int64) error {
	switch {
	case fence.Token(mark) == token:
		return nil
	case fence.Token(mark) > token:
		return &fence.StaleError{Resource: resource, Presented: token, Highest: fence.Token(mark)}
	default: // GREATEST cannot return less than token
		return fmt.Errorf("pgguard: %q: mark %d after fencing with token %d", resource, mark, token)
	}
}

// rollbackTimeout bounds rollbacks issued on a path that may run with an
// already cancelled context.
const rollbackTimeout = 5 * time.Second

func rollback(ctx context.Context, tx pgx.Tx) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	_ = tx.Rollback(ctx) // the connection dies if this fails; nothing to commit either way
}

// busyCodes are the SQLSTATEs after which retrying the transaction is the
// right answer.
var busyCodes = map[string]string{
	"55P03": "lock timeout",
	"40001": "serialization failure",
	"40P01": "deadlock",
}

func (g *Guard) dbError(resource, op string, err error) error {
	if op != "commit" && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		// ctx ended before the mark was decided (typically while waiting
		// for its row lock); the transaction is rolled back, nothing was
		// written. A ctx ending during COMMIT is not mapped: its outcome
		// is unknown.
		return fmt.Errorf("pgguard: %s %q: %w: %w", op, resource, fence.ErrBusy, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if what, ok := busyCodes[pgErr.Code]; ok {
			return fmt.Errorf("pgguard: %s %q: %s: %w: %w", op, resource, what, fence.ErrBusy, err)
		}
		if pgErr.Code == "42P01" {
			return fmt.Errorf("pgguard: %s %q: table %s.%s missing (apply migrations.Migrate with set migrations.Guard): %w", op, resource, g.schema, MarksTable, err)
		}
	}
	return fmt.Errorf("pgguard: %s %q: %w", op, resource, err)
}

type txKey struct{}

// TxFromContext returns the transaction of the Guard.Fence call whose write
// function received ctx.
func TxFromContext(ctx context.Context) (pgx.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(pgx.Tx)
	return tx, ok
}

// Fence implements fence.Guard: it begins a transaction on Config.DB
// (isolation Config.IsoLevel, lock waits bounded by Config.LockTimeout),
// runs the fence statement (in the same round trip as BEGIN when Config.DB
// implements Batcher, as *pgxpool.Pool and *pgx.Conn do; see BeginFenced), calls write with a ctx that carries the transaction (get it
// with TxFromContext) and the token (fence.FromContext), and commits. Any
// error, and a panic in write, rolls the transaction back, so the mark is
// raised if and only if write's statements commit. The error of write is
// returned as is; a serialization failure at commit matches fence.ErrBusy.
// write must not commit or roll back the transaction itself, nor use it from
// other goroutines (a pgx.Tx is not safe for concurrent use).
//
// If the commit's reply is lost (connection failure during COMMIT), the
// outcome is unknown and Fence returns the connection error; check with Mark
// or a read of the guarded data before assuming either outcome.
func (g *Guard) Fence(ctx context.Context, resource string, token fence.Token, write func(ctx context.Context) error) error {
	if err := fence.CheckArgs(resource, token); err != nil {
		return err
	}
	if write == nil {
		return fmt.Errorf("%w: Fence with nil write", ErrNilArgument)
	}
	if g.db == nil {
		return ErrNoDB
	}
	var tx pgx.Tx
	if b, ok := g.db.(Batcher); ok {
		// BEGIN, lock timeout and fence in one round trip.
		t, err := g.beginFenced(ctx, b, resource, token)
		if err != nil {
			return err
		}
		tx = t
	} else {
		t, err := g.db.BeginTx(ctx, g.txOpts)
		if err != nil {
			return g.dbError(resource, "begin", err)
		}
		tx = t
		if err := g.FenceTx(ctx, tx, resource, token); err != nil {
			return err
		}
	}
	defer rollback(ctx, tx) // no-op (ErrTxClosed) after Commit
	wctx := context.WithValue(fence.WithToken(ctx, token), txKey{}, tx)
	if err := write(wctx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return g.dbError(resource, "commit", err)
	}
	return nil
}

// Mark returns the high-water mark of resource (0 when it has none), read
// on Config.DB.
func (g *Guard) Mark(ctx context.Context, resource string) (fence.Token, error) {
	if err := fence.ValidateResource(resource); err != nil {
		return 0, err
	}
	if g.db == nil {
		return 0, ErrNoDB
	}
	var v int64
	err := g.db.QueryRow(ctx, g.readSQL, resource).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, g.dbError(resource, "mark", err)
	}
	return fence.Token(v), nil
}

// BeginFenced begins a transaction on db (isolation Config.IsoLevel, lock
// waits bounded by Config.LockTimeout) and fences it for resource and token,
// in one round trip: BEGIN, the lock timeout (set_config(..., is_local)) and
// the fence statement of FenceTx travel as one pgx.Batch (Batch.BeginTx).
// On success the returned transaction holds the raised mark and its row
// lock, exactly as after FenceTx; the caller writes in it and commits or
// rolls it back (with *pgxpool.Pool, the connection goes back to the pool
// then). A guarded write transaction thus costs the same round trips as an
// unguarded one: BEGIN+fence, the caller's statements, COMMIT.
//
// Errors are those of FenceTx (input errors before any I/O, *fence.StaleError
// with the exact mark, fence.ErrBusy for lock timeout, serialization
// failure, deadlock and ctx ending before the decision), and a failure to
// begin (wrapped, also fence.ErrBusy when ctx ended). On every error no
// transaction is returned: it has been rolled back and its connection
// released. db must not be inside a transaction itself.
func (g *Guard) BeginFenced(ctx context.Context, db Batcher, resource string, token fence.Token) (pgx.Tx, error) {
	if err := fence.CheckArgs(resource, token); err != nil {
		return nil, err
	}
	if db == nil {
		return nil, fmt.Errorf("%w: BeginFenced with nil db", ErrNilArgument)
	}
	return g.beginFenced(ctx, db, resource, token)
}

func (g *Guard) beginFenced(ctx context.Context, db Batcher, resource string, token fence.Token) (pgx.Tx, error) {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{IsoLevel: g.iso})
	if g.lockMs > 0 {
		b.Queue(`SELECT set_config('lock_timeout', $1, true)`, strconv.FormatInt(g.lockMs, 10)+"ms")
	}
	var (
		mark    int64
		scanned bool
	)
	b.Queue(g.fenceSQL, resource, int64(token)).QueryRow(func(row pgx.Row) error {
		if err := row.Scan(&mark); err != nil {
			return err
		}
		scanned = true
		return nil
	})
	br := db.SendBatch(ctx, b)
	tx := br.Tx()
	err := br.Close()
	if err == nil && tx == nil {
		err = errors.New("pgguard: SendBatch returned no transaction for a batch begun with Batch.BeginTx")
	}
	if err == nil {
		err = decide(resource, token, mark)
		g.met.Decision(ctx, err)
	} else if !scanned {
		err = g.dbError(resource, "fence", err)
	}
	if err != nil {
		if tx != nil {
			rollback(ctx, tx)
		}
		return nil, err
	}
	return tx, nil
}
