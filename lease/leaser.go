package lease

import (
	"context"

	"github.com/google/uuid"
)

// Leaser is what grants and manages leases: a *Manager, or a
// *leaseops.Router that sends each key to the Manager of its database.
// Code that only needs leases (mcpfence, a tool's own wrapper) takes a
// Leaser so that it works with either.
type Leaser interface {
	Acquire(ctx context.Context, key Key, opts ...Option) (*Lease, error)
	AcquireWait(ctx context.Context, key Key, opts ...Option) (*Lease, error)
	Takeover(ctx context.Context, key Key, opts ...Option) (*Lease, error)
	Resume(ctx context.Context, key Key, runID uuid.UUID, opts ...Option) (*Lease, error)
	Run(ctx context.Context, key Key, fn func(ctx context.Context, l *Lease) error, opts ...Option) error
	Renew(ctx context.Context, key Key, runID uuid.UUID) (Renewal, error)
	Release(ctx context.Context, key Key, runID uuid.UUID) (ReleaseResult, error)
	Watch(ctx context.Context, key Key, opts ...Option) (*Watcher, error)
	Inspect(ctx context.Context, key Key) (Ownership, error)
	Revoke(ctx context.Context, key Key, runID uuid.UUID) (Revocation, error)
	RevokeCurrent(ctx context.Context, key Key) (Revocation, error)
	List(ctx context.Context, opts ...Option) ([]Ownership, error)
	Leases() []LocalLease
}

var _ Leaser = (*Manager)(nil)
