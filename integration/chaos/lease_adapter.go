package chaos

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease"
)

// The runner's default lease is package lease.
func init() {
	registerLeaser("lease", newPkgLeaser)
	DefaultLease = "lease"
}

// pkgLeaser adapts a lease.Manager (one per execution, on the execution's
// own pool). The Manager renews in the background as well; the runner's
// explicit renewals come on top and are the ones recorded, while work steps
// record the trust deadline in force, which reveals the background ones.
type pkgLeaser struct{ m *lease.Manager }

func newPkgLeaser(pool *pgxpool.Pool, pc procConfig) (Leaser, error) {
	m, err := lease.New(lease.Config{
		Pool:         pool,
		Schema:       pc.Schema,
		TTL:          pc.TTL,
		SafetyMargin: pc.Margin,
	})
	if err != nil {
		return nil, err
	}
	return &pkgLeaser{m: m}, nil
}

func (p *pkgLeaser) Acquire(ctx context.Context, key Key) (Held, error) {
	l, err := p.m.Acquire(ctx, lease.Key{AccountID: key.Account, SessionID: key.Session})
	if errors.Is(err, lease.ErrHeld) {
		return nil, fmt.Errorf("%w: %w", ErrRefused, err)
	}
	if err != nil {
		return nil, err
	}
	return pkgHeld{l}, nil
}

// Close stops the Manager (its renewer and listener) and releases what it
// still holds.
func (p *pkgLeaser) Close() error { return p.m.Close() }

type pkgHeld struct{ l *lease.Lease }

func (h pkgHeld) Token() fence.Token       { return h.l.Token() }
func (h pkgHeld) RunID() string            { return h.l.RunID().String() }
func (h pkgHeld) Context() context.Context { return h.l.Context() }
func (h pkgHeld) TrustDeadline() time.Time { return h.l.TrustDeadline() }

func (h pkgHeld) Renew(ctx context.Context) error {
	_, err := h.l.Renew(ctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, lease.ErrLost), errors.Is(err, lease.ErrTrustExpired),
		errors.Is(err, lease.ErrReleased), errors.Is(err, lease.ErrClosed):
		return fmt.Errorf("%w: %w", ErrRejected, err)
	}
	return err
}

func (h pkgHeld) Release(ctx context.Context) error {
	_, err := h.l.Release(ctx)
	return err
}
