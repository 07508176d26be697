package chaos

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/sql/migrations"
)

// Leaser is what the chaos runner needs from a lease implementation. The
// runner drives renewals itself so that each one is recorded.
type Leaser interface {
	// Acquire tries once to take key. A key held by someone else yields an
	// error matching ErrRefused.
	Acquire(ctx context.Context, key Key) (Held, error)
}

// Held is one granted lease.
type Held interface {
	Token() fence.Token
	RunID() string
	// Context ends when ownership is lost (renewal rejected, trust deadline
	// passed, released); context.Cause says why.
	Context() context.Context
	// TrustDeadline is the local monotonic deadline in force.
	TrustDeadline() time.Time
	// Renew extends the lease; an error matching ErrRejected means the
	// database said it is no longer ours.
	Renew(ctx context.Context) error
	// Release gives the lease up (idempotent).
	Release(ctx context.Context) error
}

// Key is a lease key.
type Key struct{ Account, Session string }

// String formats k as account/session.
func (k Key) String() string { return k.Account + "/" + k.Session }

// ErrRefused is matched by Acquire errors meaning "held by someone else".
var ErrRefused = errors.New("chaos: lease held by another run")

// ErrRejected is matched by Renew errors meaning "not ours any more".
var ErrRejected = errors.New("chaos: renewal rejected")

// Loss causes of the reference leaser.
var (
	errDeadline = errors.New("trust deadline passed")
	errReleased = errors.New("released")
)

// refLeaser is a small lease over the fencekit lease schema that follows
// the lease design (docs/lease.md): one conditional upsert per acquisition with the token
// drawn under the row lock, rows kept on release, renew and release by
// run_id, a local trust deadline sent_at + ttl - margin on the monotonic
// clock. It lets the harness run without package lease and, with
// overtrust > 0, serves as a deliberately broken lease (it trusts the lease
// past its expiry) that the checker must catch.
type refLeaser struct {
	pool      *pgxpool.Pool
	ttl       time.Duration
	margin    time.Duration
	overtrust time.Duration
	acquire   string
	renew     string
	release   string
}

func newRefLeaser(pool *pgxpool.Pool, schema string, ttl, margin, overtrust time.Duration) (*refLeaser, error) {
	q, err := migrations.QuoteIdentifier(schema)
	if err != nil {
		return nil, err
	}
	t := q + ".fencekit_leases"
	seq := q + ".fencekit_token_seq"
	return &refLeaser{pool: pool, ttl: ttl, margin: margin, overtrust: overtrust,
		acquire: `INSERT INTO ` + t + ` AS l (account_id, session_id, run_id, fence_token, acquired_at, renewed_at, expires_at)
VALUES ($1, $2, $3, nextval('` + seq + `'), clock_timestamp(), clock_timestamp(), clock_timestamp() + $4 * interval '1 microsecond')
ON CONFLICT (account_id, session_id) DO UPDATE SET
  run_id = EXCLUDED.run_id, fence_token = nextval('` + seq + `'), acquired_at = EXCLUDED.acquired_at,
  renewed_at = EXCLUDED.renewed_at, expires_at = EXCLUDED.expires_at, released_at = NULL
WHERE l.expires_at <= clock_timestamp()
RETURNING fence_token`,
		renew: `UPDATE ` + t + ` SET renewed_at = clock_timestamp(), expires_at = clock_timestamp() + $4 * interval '1 microsecond'
WHERE account_id = $1 AND session_id = $2 AND run_id = $3 AND released_at IS NULL AND expires_at > clock_timestamp()`,
		release: `UPDATE ` + t + ` SET released_at = clock_timestamp(), expires_at = clock_timestamp()
WHERE account_id = $1 AND session_id = $2 AND run_id = $3 AND released_at IS NULL`,
	}, nil
}

func (l *refLeaser) Acquire(ctx context.Context, key Key) (Held, error) {
	run := uuid.New()
	sent := time.Now()
	var tok int64
	err := l.pool.QueryRow(ctx, l.acquire, key.Account, key.Session, run, l.ttl.Microseconds()).Scan(&tok)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", ErrRefused, key)
	}
	if err != nil {
		return nil, err
	}
	h := &refHeld{l: l, key: key, run: run, token: fence.Token(tok)}
	h.ctx, h.cancel = context.WithCancelCause(context.Background())
	h.deadline = sent.Add(l.ttl - l.margin + l.overtrust)
	h.timer = time.AfterFunc(time.Until(h.deadline), func() { h.cancel(errDeadline) })
	return h, nil
}

type refHeld struct {
	l      *refLeaser
	key    Key
	run    uuid.UUID
	token  fence.Token
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	deadline time.Time
	timer    *time.Timer
}

// abandon marks refHeld as a lease that can be dropped without release: it
// does not renew itself, so it simply expires. (package lease renews in the
// background until released; dropping it is modelled by SIGKILL instead.)
func (h *refHeld) abandon() {}

func (h *refHeld) Token() fence.Token       { return h.token }
func (h *refHeld) RunID() string            { return h.run.String() }
func (h *refHeld) Context() context.Context { return h.ctx }

func (h *refHeld) TrustDeadline() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.deadline
}

func (h *refHeld) Renew(ctx context.Context) error {
	if h.ctx.Err() != nil {
		return fmt.Errorf("%w: %w", ErrRejected, context.Cause(h.ctx)) //nolint:contextcheck // reads the lease's own context
	}
	sent := time.Now()
	tag, err := h.l.pool.Exec(ctx, h.l.renew, h.key.Account, h.key.Session, h.run, h.l.ttl.Microseconds())
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		h.cancel(ErrRejected)
		return ErrRejected
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.timer.Stop() { // the deadline fired while the renewal was in flight
		return fmt.Errorf("%w: trust deadline passed during the renewal", ErrRejected)
	}
	h.deadline = sent.Add(h.l.ttl - h.l.margin + h.l.overtrust)
	h.timer.Reset(time.Until(h.deadline))
	return nil
}

func (h *refHeld) Release(ctx context.Context) error {
	h.mu.Lock()
	h.timer.Stop()
	h.mu.Unlock()
	h.cancel(errReleased)
	_, err := h.l.pool.Exec(ctx, h.l.release, h.key.Account, h.key.Session, h.run)
	return err
}
