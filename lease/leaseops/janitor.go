package leaseops

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/obs"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/internal/leasemetrics"
	"github.com/fencekit/fencekit/sql/migrations"
)

// Janitor defaults and limits.
const (
	// DefaultRetention is JanitorConfig.Retention's default.
	DefaultRetention = 24 * time.Hour
	// MinRetention is the smallest Retention NewJanitor accepts.
	MinRetention = time.Hour
	// RetentionFactor: Retention must be at least RetentionFactor times
	// JanitorConfig.StatementBound.
	RetentionFactor = 100
	// DefaultJanitorBatch is JanitorConfig.BatchSize's default.
	DefaultJanitorBatch = 500
	// DefaultJanitorInterval is JanitorConfig.Interval's default.
	DefaultJanitorInterval = 10 * time.Minute
	// DefaultMaxBatches is JanitorConfig.MaxBatches' default.
	DefaultMaxBatches = 100
)

// JanitorConfig configures a Janitor. Zero fields take the defaults.
type JanitorConfig struct {
	// Pool is the lease database (required). The Janitor never closes it.
	Pool *pgxpool.Pool
	// Schema of the lease tables. Default "public".
	Schema string
	// Retention: a row is deleted once its expires_at (the release time for
	// released rows; displaced_at for a displaced run's record) is more
	// than Retention in the past on the database clock. Default
	// DefaultRetention; at least MinRetention and at least RetentionFactor ×
	// StatementBound. See Janitor for why.
	Retention time.Duration
	// StatementBound is the longest an acquire statement can run: the
	// larger of the Managers' CallTimeout and the server's
	// statement_timeout for their role. Default lease.DefaultCallTimeout.
	StatementBound time.Duration
	// BatchSize is the most rows one DELETE removes. Default
	// DefaultJanitorBatch; at most lease.MaxBatch.
	BatchSize int
	// MaxBatches bounds the statements of one Sweep. Default
	// DefaultMaxBatches.
	MaxBatches int
	// Interval between the sweeps of the background loop; the first runs
	// one Interval after NewJanitor. Default DefaultJanitorInterval.
	Interval time.Duration
	// CallTimeout bounds each statement. Default lease.DefaultCallTimeout.
	CallTimeout time.Duration
	// Logger receives Debug logs of each sweep and Warn logs of failed
	// ones. Nil discards them.
	Logger *slog.Logger
	// MeterProvider records leasemetrics.JanitorDeleted (attribute table:
	// leasemetrics.TableLeases, leasemetrics.TableDisplaced and
	// leasemetrics.TableManagers).
	// Nil records nothing.
	MeterProvider metric.MeterProvider
	// TracerProvider records one spanJanitorSweep span per sweep (a child
	// of the span in Sweep's ctx; the loop's sweeps are root spans). Nil
	// records none.
	TracerProvider trace.TracerProvider
}

// Janitor deletes lease rows that were released or expired long ago, and
// the records of runs a takeover displaced long ago, in bounded batches: every Interval in a background goroutine that
// NewJanitor starts and Close stops, and on demand with Sweep.
//
// Why rows are kept at all (docs/lease.md, "Token order"): the acquire statement draws a
// token for its INSERT before it holds any row lock, and uses it only when
// no row exists for the key. While the key's row exists, a statement that
// drew a value and then stalled takes the ON CONFLICT path and draws a new
// value under the row lock, so it cannot be granted a token smaller than a
// grant committed while it stalled. Deleting the row reopens the INSERT
// path, so deleting breaks per-key token order ONLY if a statement that
// drew its token before the delete can still insert after it. Every
// statement that drew a token before a grant g of the key started before g
// and ends (commits or is cancelled) within StatementBound of its start; g
// happened no later than the row's expires_at. A row is deleted only when
// expires_at is more than Retention ≥ RetentionFactor × StatementBound in
// the past, so every such statement is over by then. This depends on
// StatementBound being a real bound: set statement_timeout for the role
// (a client-side timeout alone does not stop a backend whose client
// vanished).
//
// Each batch is one statement: it selects at most BatchSize old rows
// FOR UPDATE SKIP LOCKED (rows being acquired or renewed right now are
// skipped; the row lock and PostgreSQL's re-check of the condition on the
// latest row version keep a row re-acquired meanwhile) and deletes them.
// The scan for old rows is not indexed for expired-but-never-released rows
// (an index on expires_at would be rewritten by every renewal).
//
// A heartbeat row (expires_at 'infinity', migration 0009) is dead since its
// heartbeat epoch's expires_at: the epoch's renewal requires an unexpired
// epoch, so a dead epoch never comes back and the row stays dead until a
// new grant rewrites it. It is deleted once that time is more than
// Retention in the past, as a per-lease row is. When the epoch's row is
// gone (deleted below, only once it had been expired longer than
// Retention) the row's acquired_at stands in for that time: no later than
// the true one, and never older than Retention for a grant made while this
// sweep's snapshot was taken (its epoch row may be invisible to the
// snapshot but its acquired_at is recent, and a statement running longer
// than Retention is excluded above). So the argument above holds unchanged
// with "the row's expiry" read as "its epoch's expiry": every grant of the
// key happened no later than the time compared, and every statement that
// drew a token before it has ended. The same statement deletes at most
// BatchSize rows of fencekit_managers expired more than Retention ago.
//
// The same statement deletes at most BatchSize rows of fencekit_displaced
// (the runs a takeover displaced, migration 0007) whose displaced_at is more
// than Retention in the past. A displaced run's Manager asks that table when
// its listener connects and when a renewal is refused, both within the
// run's TTL; after Retention, a Renew by the run_id of such a run reports
// lease.ErrLost without lease.ErrTakenOver.
type Janitor struct {
	cfg       JanitorConfig
	sweepSQL  string
	log       *slog.Logger
	deleted   metric.Int64Counter
	delAttrs  metric.MeasurementOption
	dispAttrs metric.MeasurementOption
	mgrAttrs  metric.MeasurementOption
	cancel    context.CancelFunc
	done      chan struct{}
	once      sync.Once
	tracer    trace.Tracer // nil: tracing off
}

// SweepResult is the outcome of one Sweep.
type SweepResult struct {
	Deleted int64 // fencekit_leases rows deleted
	// Displaced is the number of fencekit_displaced rows deleted (runs a
	// takeover displaced, or Revoke revoked, more than Retention ago,
	// migrations 0007 and 0009).
	Displaced int64
	// Managers is the number of fencekit_managers rows deleted (heartbeat
	// epochs expired more than Retention ago, migration 0009).
	Managers int64
	Batches  int // statements sent
	// More is true when the last batch was full and MaxBatches stopped the
	// sweep: old rows may remain for the next one.
	More bool
}

// NewJanitor validates cfg, fills defaults and starts the background loop
// (its first sweep runs one Interval later). Close stops it.
//
//nolint:contextcheck // the loop runs on its own context, stopped by Close
func NewJanitor(cfg JanitorConfig) (*Janitor, error) {
	if cfg.Pool == nil {
		return nil, &fence.ConfigError{Source: "leaseops", Field: "Pool", Reason: "nil"}
	}
	if cfg.Schema == "" {
		cfg.Schema = migrations.DefaultSchema
	}
	q, err := migrations.QuoteIdentifier(cfg.Schema)
	if err != nil {
		return nil, &fence.ConfigError{Source: "leaseops", Field: "Schema", Reason: err.Error(), Err: err}
	}
	if cfg.StatementBound == 0 {
		cfg.StatementBound = lease.DefaultCallTimeout
	}
	if cfg.StatementBound < 0 {
		return nil, &fence.ConfigError{Source: "leaseops", Field: "StatementBound", Reason: "negative: " + cfg.StatementBound.String()}
	}
	if cfg.Retention == 0 {
		cfg.Retention = DefaultRetention
	}
	if minimum := max(MinRetention, RetentionFactor*cfg.StatementBound); cfg.Retention < minimum {
		return nil, &fence.ConfigError{Source: "leaseops", Field: "Retention", Reason: fmt.Sprintf("%s is below %s (the larger of MinRetention and %d × StatementBound %s)",
			cfg.Retention, minimum, RetentionFactor, cfg.StatementBound)}
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = DefaultJanitorBatch
	}
	if cfg.BatchSize < 0 || cfg.BatchSize > lease.MaxBatch {
		return nil, &fence.ConfigError{Source: "leaseops", Field: "BatchSize", Reason: fmt.Sprintf("%d must be in 1..%d", cfg.BatchSize, lease.MaxBatch)}
	}
	if cfg.MaxBatches == 0 {
		cfg.MaxBatches = DefaultMaxBatches
	}
	if cfg.MaxBatches < 0 {
		return nil, &fence.ConfigError{Source: "leaseops", Field: "MaxBatches", Reason: fmt.Sprintf("negative: %d", cfg.MaxBatches)}
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultJanitorInterval
	}
	if cfg.Interval < 0 {
		return nil, &fence.ConfigError{Source: "leaseops", Field: "Interval", Reason: "negative: " + cfg.Interval.String()}
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
	deleted, err := obs.Meter(cfg.MeterProvider).Int64Counter(leasemetrics.JanitorDeleted, metric.WithUnit("{row}"),
		metric.WithDescription("Rows deleted by housekeeping, by table."))
	if err != nil {
		return nil, &fence.ConfigError{Source: "leaseops", Field: "MeterProvider", Reason: err.Error(), Err: err}
	}
	r := strings.NewReplacer("$S", q)
	j := &Janitor{
		cfg: cfg, log: log, deleted: deleted, tracer: obs.Tracer(cfg.TracerProvider),
		delAttrs:  metric.WithAttributeSet(attribute.NewSet(attribute.String(leasemetrics.AttrTable, leasemetrics.TableLeases))),
		dispAttrs: metric.WithAttributeSet(attribute.NewSet(attribute.String(leasemetrics.AttrTable, leasemetrics.TableDisplaced))),
		mgrAttrs:  metric.WithAttributeSet(attribute.NewSet(attribute.String(leasemetrics.AttrTable, leasemetrics.TableManagers))),
		done:      make(chan struct{}),
		// $1 retention µs, $2 batch size. Returns the rows deleted from each
		// table.
		sweepSQL: r.Replace(`WITH now_db AS MATERIALIZED (SELECT clock_timestamp() AS t),
victims AS (
  SELECT l.account_id, l.session_id
    FROM $S.fencekit_leases l, now_db n
   WHERE CASE WHEN l.expires_at = 'infinity'
              THEN coalesce((SELECT m.expires_at FROM $S.fencekit_managers m WHERE m.manager_id = l.manager_id), l.acquired_at)
              ELSE l.expires_at END < n.t - $1::bigint * interval '1 microsecond'
   LIMIT $2
     FOR UPDATE OF l SKIP LOCKED),
gone AS (
  DELETE FROM $S.fencekit_leases d USING victims v
   WHERE d.account_id = v.account_id AND d.session_id = v.session_id
  RETURNING 1),
old_displaced AS (
  SELECT x.run_id
    FROM $S.fencekit_displaced x, now_db n
   WHERE x.displaced_at < n.t - $1::bigint * interval '1 microsecond'
   LIMIT $2
     FOR UPDATE OF x SKIP LOCKED),
gone_displaced AS (
  DELETE FROM $S.fencekit_displaced d USING old_displaced o
   WHERE d.run_id = o.run_id
  RETURNING 1),
old_managers AS (
  SELECT m.manager_id
    FROM $S.fencekit_managers m, now_db n
   WHERE m.expires_at < n.t - $1::bigint * interval '1 microsecond'
   LIMIT $2
     FOR UPDATE OF m SKIP LOCKED),
gone_managers AS (
  DELETE FROM $S.fencekit_managers d USING old_managers o
   WHERE d.manager_id = o.manager_id
  RETURNING 1)
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM gone_displaced), (SELECT count(*) FROM gone_managers)`),
	}
	ctx, cancel := context.WithCancel(context.Background())
	j.cancel = cancel
	go j.loop(ctx)
	return j, nil
}

// Retention is the validated retention.
func (j *Janitor) Retention() time.Duration { return j.cfg.Retention }

// Sweep deletes old rows in batches of at most BatchSize rows of each table
// until a batch is full in neither or MaxBatches statements were sent.
func (j *Janitor) Sweep(ctx context.Context) (res SweepResult, err error) {
	ctx, span := j.startSweep(ctx)
	defer func() { endSweep(span, res, err) }()
	for res.Batches < j.cfg.MaxBatches {
		cctx, cancel := context.WithTimeout(ctx, j.cfg.CallTimeout)
		var n, nd, nm int64
		err := j.cfg.Pool.QueryRow(cctx, j.sweepSQL, j.cfg.Retention.Microseconds(), j.cfg.BatchSize).Scan(&n, &nd, &nm)
		cancel()
		if err != nil {
			return res, fmt.Errorf("leaseops: janitor sweep: %w", err)
		}
		res.Batches++
		res.Deleted += n
		res.Displaced += nd
		res.Managers += nm
		j.deleted.Add(ctx, n, j.delAttrs)
		j.deleted.Add(ctx, nd, j.dispAttrs)
		j.deleted.Add(ctx, nm, j.mgrAttrs)
		if n < int64(j.cfg.BatchSize) && nd < int64(j.cfg.BatchSize) && nm < int64(j.cfg.BatchSize) {
			return res, nil
		}
	}
	res.More = true
	return res, nil
}

func (j *Janitor) loop(ctx context.Context) {
	defer close(j.done)
	t := time.NewTicker(j.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		res, err := j.Sweep(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			j.log.Warn("leaseops: janitor sweep failed", "err", err)
		case err == nil:
			j.log.Debug("leaseops: janitor sweep", "deleted", res.Deleted, "displaced", res.Displaced, "managers", res.Managers, "batches", res.Batches, "more", res.More)
		}
	}
}

// Close stops the background loop and waits for it, cancelling a sweep in
// progress. It is idempotent and always returns nil. Sweep still works
// after Close.
func (j *Janitor) Close() error {
	j.once.Do(func() {
		j.cancel()
		<-j.done
	})
	return nil
}
