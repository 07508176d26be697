package pgguard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardobs"
	"github.com/fencekit/fencekit/sql/migrations"
)

// MarksDB is what Marks needs; *pgxpool.Pool and *pgx.Conn implement it.
type MarksDB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Marks defaults and limits.
const (
	// MinMarkIdle is the smallest idle time Marks.DeleteIdle accepts.
	MinMarkIdle = time.Hour
	// MaxMarksBatch is the most marks one Delete call removes.
	MaxMarksBatch = 1000
	// DefaultMarksCallTimeout is MarksConfig.CallTimeout's default.
	DefaultMarksCallTimeout = 5 * time.Second
)

// ErrInvalidArgument is matched by errors for bad arguments of Marks'
// methods. Nothing changed.
var ErrInvalidArgument = errors.New("pgguard: invalid argument")

// MarksConfig configures Marks.
type MarksConfig struct {
	// DB is the database holding the marks (migration set
	// migrations.Guard). Required.
	DB MarksDB
	// Schema of MarksTable. Default "public".
	Schema string
	// CallTimeout bounds each statement. Default DefaultMarksCallTimeout.
	CallTimeout time.Duration
	// MeterProvider records deletions in the counter
	// fencekit.guard.marks.deleted. Nil records nothing.
	MeterProvider metric.MeterProvider
	// TracerProvider records one fencekit.guard.marks_delete span per delete
	// statement, a child of the span in ctx. Nil records none.
	TracerProvider trace.TracerProvider
}

// Marks reads and prunes the guard's high-water marks (MarksTable).
//
// Highest is a token floor source: after a failover or restore of the
// lease database, tokens must exceed every mark a guard kept. Its method
// value fits lease.FloorSource.
//
// Deleting a mark is a hazard: the resource forgets the highest token it
// accepted, so a writer holding an old token — a paused or partitioned
// former holder — can write to it again. Delete marks only of resources
// that no longer exist (DeleteResources), or that have been idle far
// longer than any holder can stay paused (DeleteIdle). A deleted mark also
// no longer counts in Highest: keep the lease schema's stored floor up to
// date (the floor check raises it) before pruning.
type Marks struct {
	db                              MarksDB
	timeout                         time.Duration
	highestSQL, byResource, idleSQL string
	obs                             guardobs.Housekeeping
}

// NewMarks validates cfg and fills defaults. It does no I/O.
func NewMarks(cfg MarksConfig) (*Marks, error) {
	if cfg.DB == nil {
		return nil, configErr("DB", "nil", nil)
	}
	if cfg.Schema == "" {
		cfg.Schema = migrations.DefaultSchema
	}
	q, err := migrations.QuoteIdentifier(cfg.Schema)
	if err != nil {
		return nil, configErr("Schema", "not a valid identifier", err)
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = DefaultMarksCallTimeout
	}
	if cfg.CallTimeout < 0 {
		return nil, configErr("CallTimeout", "negative: "+cfg.CallTimeout.String(), nil)
	}
	obs, err := guardobs.NewHousekeeping("postgres", cfg.MeterProvider, cfg.TracerProvider)
	if err != nil {
		return nil, configErr("MeterProvider", "instruments", err)
	}
	t := q + "." + MarksTable
	return &Marks{
		db: cfg.DB, timeout: cfg.CallTimeout, obs: obs,
		highestSQL: `SELECT coalesce(max(highest_token), 0) FROM ` + t,
		// $1 resources.
		byResource: `DELETE FROM ` + t + ` WHERE resource = ANY($1::text[])`,
		// $1 idle µs, $2 limit. Marks locked by a guard transaction right
		// now are skipped; the re-check in PostgreSQL's locking keeps a mark
		// raised meanwhile.
		idleSQL: `WITH now_db AS MATERIALIZED (SELECT clock_timestamp() AS t),
victims AS (
  SELECT m.resource FROM ` + t + ` m, now_db n
   WHERE m.updated_at < n.t - $1::bigint * interval '1 microsecond'
   LIMIT $2
     FOR UPDATE OF m SKIP LOCKED)
DELETE FROM ` + t + ` d USING victims v WHERE d.resource = v.resource`,
	}, nil
}

// Highest returns the highest token any mark holds (0 without marks). It
// scans the whole table: call it at startup and after failovers and
// restores, not per request.
func (g *Marks) Highest(ctx context.Context) (fence.Token, error) {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	var v int64
	if err := g.db.QueryRow(ctx, g.highestSQL).Scan(&v); err != nil {
		return 0, fmt.Errorf("pgguard: read marks: %w", err)
	}
	return fence.Token(v), nil
}

// DeleteResources deletes the marks of resources that no longer exist, at
// most MaxMarksBatch per call, in one statement. Every name must pass
// fence.ValidateResource; a bad name fails the call before any I/O. It
// returns the number of marks deleted. Never call it for a resource that
// still exists (see Marks).
func (g *Marks) DeleteResources(ctx context.Context, resources []string) (int64, error) {
	if len(resources) > MaxMarksBatch {
		return 0, fmt.Errorf("%w: delete marks: %d resources, at most %d per call", ErrInvalidArgument, len(resources), MaxMarksBatch)
	}
	for _, r := range resources {
		if err := fence.ValidateResource(r); err != nil {
			return 0, fmt.Errorf("%w: delete marks: %w", ErrInvalidArgument, err)
		}
	}
	if len(resources) == 0 {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	start := time.Now()
	tag, err := g.db.Exec(ctx, g.byResource, resources)
	g.obs.Deleted(ctx, start, tag.RowsAffected(), err)
	if err != nil {
		return 0, fmt.Errorf("pgguard: delete marks: %w", err)
	}
	return tag.RowsAffected(), nil
}

// DeleteIdle deletes at most limit (1..MaxMarksBatch) marks that no write
// has raised or re-used for longer than idle (at least MinMarkIdle), in one
// statement, and returns how many it deleted. Call it again while it
// returns limit. A resource that still exists loses its protection against
// holders older than idle (see Marks).
func (g *Marks) DeleteIdle(ctx context.Context, idle time.Duration, limit int) (int64, error) {
	if idle < MinMarkIdle {
		return 0, fmt.Errorf("%w: delete idle marks: idle %s is below MinMarkIdle %s", ErrInvalidArgument, idle, MinMarkIdle)
	}
	if limit < 1 || limit > MaxMarksBatch {
		return 0, fmt.Errorf("%w: delete idle marks: limit %d must be in 1..%d", ErrInvalidArgument, limit, MaxMarksBatch)
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	start := time.Now()
	tag, err := g.db.Exec(ctx, g.idleSQL, idle.Microseconds(), limit)
	g.obs.Deleted(ctx, start, tag.RowsAffected(), err)
	if err != nil {
		return 0, fmt.Errorf("pgguard: delete idle marks: %w", err)
	}
	return tag.RowsAffected(), nil
}
