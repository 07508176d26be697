package lease

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/obs"
	"github.com/fencekit/fencekit/sql/migrations"
)

// MarksDB is what GuardMarks needs; *pgxpool.Pool and *pgx.Conn implement it.
type MarksDB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// MinMarkIdle is the smallest idle time GuardMarks.DeleteIdle accepts.
const MinMarkIdle = time.Hour

// GuardMarksConfig configures GuardMarks.
type GuardMarksConfig struct {
	// DB is the database holding the PostgreSQL guard's marks (migration
	// set migrations.Guard) — the lease database or another one. Required.
	DB MarksDB
	// Schema of fencekit_guard_marks. Default "public".
	Schema string
	// CallTimeout bounds each statement. Default DefaultCallTimeout.
	CallTimeout time.Duration
	// MeterProvider records deletions in MetricJanitorDeleted
	// (table="guard_marks"). Nil records nothing.
	MeterProvider metric.MeterProvider
}

// GuardMarks reads and prunes the PostgreSQL guard's high-water marks
// (table fencekit_guard_marks, written by guards/pgguard). The lease
// package reads the table by name and does not import the guard.
//
// Highest is a token floor source (FloorSource via Floor): after a restore
// of the lease database, tokens must exceed every mark a guard kept.
//
// Deleting a mark is a hazard: the resource forgets the highest token it
// accepted, so a writer holding an old token — a paused or partitioned
// former holder — can write to it again. Delete marks only of resources
// that no longer exist (DeleteResources), or that have been idle far
// longer than any holder can stay paused (DeleteIdle). A deleted mark also
// no longer counts in Highest: keep an operator floor (StaticFloor) or the
// schema's stored floor (CheckTokenFloor raises it) up to date before
// pruning.
type GuardMarks struct {
	db                              MarksDB
	timeout                         time.Duration
	highestSQL, byResource, idleSQL string
	deleted                         metric.Int64Counter
	delAttrs                        metric.MeasurementOption
}

// NewGuardMarks validates cfg and fills defaults. It does no I/O.
func NewGuardMarks(cfg GuardMarksConfig) (*GuardMarks, error) {
	if cfg.DB == nil {
		return nil, &ConfigError{Field: "DB", Reason: "nil"}
	}
	if cfg.Schema == "" {
		cfg.Schema = migrations.DefaultSchema
	}
	q, err := migrations.QuoteIdentifier(cfg.Schema)
	if err != nil {
		return nil, &ConfigError{Field: "Schema", Reason: err.Error(), Err: err}
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.CallTimeout < 0 {
		return nil, &ConfigError{Field: "CallTimeout", Reason: "negative: " + cfg.CallTimeout.String()}
	}
	deleted, err := obs.Meter(cfg.MeterProvider).Int64Counter(MetricJanitorDeleted, metric.WithUnit("{row}"),
		metric.WithDescription("Rows deleted by housekeeping, by table."))
	if err != nil {
		return nil, &ConfigError{Field: "MeterProvider", Reason: err.Error(), Err: err}
	}
	t := q + ".fencekit_guard_marks"
	return &GuardMarks{
		db: cfg.DB, timeout: cfg.CallTimeout, deleted: deleted,
		delAttrs:   attrs(attribute.String("table", "guard_marks")),
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
// scans the whole table (max over the primary key's heap): call it at
// startup and after restores, not per request.
func (g *GuardMarks) Highest(ctx context.Context) (fence.Token, error) {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	var v int64
	if err := g.db.QueryRow(ctx, g.highestSQL).Scan(&v); err != nil {
		return 0, fmt.Errorf("lease: read guard marks: %w", err)
	}
	return fence.Token(v), nil
}

// Floor is Highest as a FloorSource, for Config.TokenFloor.
func (g *GuardMarks) Floor() FloorSource { return g.Highest }

// DeleteResources deletes the marks of resources that no longer exist, at
// most MaxBatch per call, in one statement. Every name must pass
// fence.ValidateResource; a bad name fails the call before any I/O. It
// returns the number of marks deleted. Never call it for a resource that
// still exists (see GuardMarks).
func (g *GuardMarks) DeleteResources(ctx context.Context, resources []string) (int64, error) {
	if len(resources) > MaxBatch {
		return 0, fmt.Errorf("%w: delete guard marks: %d resources, at most %d per call", ErrInvalidArgument, len(resources), MaxBatch)
	}
	for _, r := range resources {
		if err := fence.ValidateResource(r); err != nil {
			return 0, fmt.Errorf("%w: delete guard marks: %w", ErrInvalidArgument, err)
		}
	}
	if len(resources) == 0 {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	tag, err := g.db.Exec(ctx, g.byResource, resources)
	if err != nil {
		return 0, fmt.Errorf("lease: delete guard marks: %w", err)
	}
	g.deleted.Add(ctx, tag.RowsAffected(), g.delAttrs)
	return tag.RowsAffected(), nil
}

// DeleteIdle deletes at most limit (1..MaxBatch) marks that no write has
// raised or re-used for longer than idle (at least MinMarkIdle), in one
// statement, and returns how many it deleted. Call it again while it
// returns limit. A resource that still exists loses its protection against
// holders older than idle (see GuardMarks).
func (g *GuardMarks) DeleteIdle(ctx context.Context, idle time.Duration, limit int) (int64, error) {
	if idle < MinMarkIdle {
		return 0, fmt.Errorf("%w: delete idle guard marks: idle %s is below MinMarkIdle %s", ErrInvalidArgument, idle, MinMarkIdle)
	}
	if limit < 1 || limit > MaxBatch {
		return 0, fmt.Errorf("%w: delete idle guard marks: limit %d must be in 1..%d", ErrInvalidArgument, limit, MaxBatch)
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	tag, err := g.db.Exec(ctx, g.idleSQL, idle.Microseconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("lease: delete idle guard marks: %w", err)
	}
	g.deleted.Add(ctx, tag.RowsAffected(), g.delAttrs)
	return tag.RowsAffected(), nil
}
