package rivereffects

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/fencekit/fencekit/effects"
	"github.com/fencekit/fencekit/fence"
)

// Kind is the river job kind of Args.
const Kind = "fencekit_effect"

// DefaultMinSnooze is WorkerConfig.MinSnooze's default.
const DefaultMinSnooze = time.Second

// Args is the river job of one effect: its id, nothing else (the request
// stays in the effect row). Jobs are unique by id.
type Args struct {
	EffectID uuid.UUID `json:"effect_id" river:"unique"`
}

// Kind implements river.JobArgs.
func (Args) Kind() string { return Kind }

// Config configures a Recorder.
type Config struct {
	// Outbox records the effects (required).
	Outbox *effects.Outbox
	// Client inserts the jobs (required). An insert-only client (no
	// Queues, no Workers) is enough. Its schema must be reachable from the
	// recording transaction: the lease database.
	Client *river.Client[pgx.Tx]
	// Pool opens Record's own transactions (required for Record; RecordTx
	// uses the caller's). The lease database.
	Pool *pgxpool.Pool
	// InsertOpts are the jobs' insert options (queue, priority, …); nil
	// uses river's defaults. UniqueOpts is always ByArgs.
	InsertOpts *river.InsertOpts
	// LockTimeout bounds the lease-row lock wait in Record's own
	// transactions. Default effects.DefaultLockTimeout.
	LockTimeout time.Duration
}

// Recorder records effects and inserts their river jobs in the same
// transaction. It is safe for concurrent use.
type Recorder struct {
	o           *effects.Outbox
	client      *river.Client[pgx.Tx]
	pool        *pgxpool.Pool
	opts        river.InsertOpts
	lockTimeout string
}

// New validates cfg and returns a Recorder. It does no I/O. Errors match
// fence.ErrInvalidConfig.
func New(cfg Config) (*Recorder, error) {
	switch {
	case cfg.Outbox == nil:
		return nil, &fence.ConfigError{Source: "rivereffects", Field: "Outbox", Reason: "nil"}
	case cfg.Client == nil:
		return nil, &fence.ConfigError{Source: "rivereffects", Field: "Client", Reason: "nil"}
	case cfg.LockTimeout < 0:
		return nil, &fence.ConfigError{Source: "rivereffects", Field: "LockTimeout", Reason: "negative"}
	}
	r := &Recorder{o: cfg.Outbox, client: cfg.Client, pool: cfg.Pool}
	if cfg.InsertOpts != nil {
		r.opts = *cfg.InsertOpts
	}
	r.opts.UniqueOpts = river.UniqueOpts{ByArgs: true}
	lt := cfg.LockTimeout
	if lt == 0 {
		lt = effects.DefaultLockTimeout
	}
	r.lockTimeout = fmt.Sprintf("%dms", max(lt.Milliseconds(), 1))
	return r, nil
}

// RecordTx records e in tx under the claim ctx carries (effects.Outbox.RecordTx)
// and, in the same tx, inserts its job. The same (lease key, request key)
// recorded again returns the first effect's id and inserts no second job
// (unique by id while the first exists). On any error but the input errors
// tx has been rolled back: neither the effect nor the job, nor the
// caller's earlier work in tx, can commit. Errors are RecordTx's, or the
// job insert's.
func (r *Recorder) RecordTx(ctx context.Context, tx pgx.Tx, e effects.Effect) (uuid.UUID, error) {
	id, err := r.o.RecordTx(ctx, tx, e)
	if err != nil {
		return uuid.Nil, err
	}
	opts := r.opts
	if _, err := r.client.InsertTx(ctx, tx, Args{EffectID: id}, &opts); err != nil {
		rollback(ctx, tx)
		return uuid.Nil, fence.WrapContext(ctx, fmt.Errorf("rivereffects: insert job of effect %s: %w", id, err))
	}
	return id, nil
}

// Record is RecordTx in a transaction of its own on Config.Pool, committed
// before it returns. A commit whose outcome is unknown matches
// fence.ErrOutcomeUnknown: look the request key up again.
func (r *Recorder) Record(ctx context.Context, e effects.Effect) (uuid.UUID, error) {
	if ctx == nil {
		return uuid.Nil, fmt.Errorf("rivereffects: Record with nil ctx: %w", fence.ErrNilArgument)
	}
	if r.pool == nil {
		return uuid.Nil, &fence.ConfigError{Source: "rivereffects", Field: "Pool", Reason: "nil (Record needs it; RecordTx does not)"}
	}
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return uuid.Nil, fence.WrapContext(ctx, fmt.Errorf("rivereffects: begin: %w", err))
	}
	defer rollback(ctx, tx)
	if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1::text, true)`, r.lockTimeout); err != nil {
		return uuid.Nil, fence.WrapContext(ctx, fmt.Errorf("rivereffects: set lock_timeout: %w", err))
	}
	id, err := r.RecordTx(ctx, tx, e)
	if err != nil {
		return uuid.Nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		if pgconn.SafeToRetry(err) && !errors.Is(err, pgconn.ErrConnClosed) {
			return uuid.Nil, fence.WrapContext(ctx, fmt.Errorf("rivereffects: commit: %w", err))
		}
		return uuid.Nil, fence.OutcomeUnknown(ctx, "rivereffects: commit", e.RequestKey, err)
	}
	return id, nil
}

func rollback(ctx context.Context, tx pgx.Tx) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = tx.Rollback(ctx)
}

// WorkerConfig configures a Worker.
type WorkerConfig struct {
	// Relay delivers (required): its targets, ClaimFor, backoff and name
	// apply. It need not be started.
	Relay *effects.Relay
	// MinSnooze is the shortest snooze of a job whose effect is not final
	// after the attempt. Default DefaultMinSnooze.
	MinSnooze time.Duration
}

// Worker is the river worker of Args: one delivery attempt per job run,
// through Relay.DeliverEffect. Register it with river.AddWorker.
type Worker struct {
	river.WorkerDefaults[Args]
	relay     *effects.Relay
	minSnooze time.Duration
}

// NewWorker validates cfg and returns a Worker. Errors match
// fence.ErrInvalidConfig.
func NewWorker(cfg WorkerConfig) (*Worker, error) {
	if cfg.Relay == nil {
		return nil, &fence.ConfigError{Source: "rivereffects", Field: "Relay", Reason: "nil"}
	}
	if cfg.MinSnooze < 0 {
		return nil, &fence.ConfigError{Source: "rivereffects", Field: "MinSnooze", Reason: "negative"}
	}
	w := &Worker{relay: cfg.Relay, minSnooze: cfg.MinSnooze}
	if w.minSnooze == 0 {
		w.minSnooze = DefaultMinSnooze
	}
	return w, nil
}

// Timeout implements river.Worker: none of river's own. Each attempt is
// bounded by the Relay's ClaimFor (its context ends a tenth early).
func (*Worker) Timeout(*river.Job[Args]) time.Duration { return -1 }

// Work implements river.Worker. It completes the job when the effect is
// final (delivered now or before, by anyone) or missing; it snoozes the job
// until the effect is due again when it is not final (MinSnooze while
// another relay's claim holds it); it returns
// the database's error (river retries) when the claim or read failed.
func (w *Worker) Work(ctx context.Context, job *river.Job[Args]) error {
	if job.Args.EffectID == uuid.Nil {
		return river.JobCancel(&effects.InputError{Field: "ID", Reason: "nil uuid in job args"})
	}
	res, err := w.relay.DeliverEffect(ctx, job.Args.EffectID)
	if err != nil {
		return err
	}
	if res.State == "" || res.State.Final() {
		return nil
	}
	if res.ClaimedElsewhere { // a relay is delivering it: look again soon
		return river.JobSnooze(w.minSnooze)
	}
	return river.JobSnooze(max(res.Due, w.minSnooze))
}
