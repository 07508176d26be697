package leaseops

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/google/uuid"

	"github.com/fencekit/fencekit/lease"
)

// RouterConfig configures a Router.
type RouterConfig struct {
	// Partitions are one lease.Manager per lease database (required, at least
	// one). Their order is part of the routing: never reorder, insert or
	// remove a partition without migrating the accounts that move (see
	// docs/operations.md, "Partition leases by account").
	Partitions []*lease.Manager
	// Partition maps a key to an index into Partitions. It must depend on
	// AccountID only (so an account's resources see tokens of one
	// partition) and be stable. Default: FNV-1a of AccountID modulo
	// len(Partitions).
	Partition func(lease.Key) int
}

// Router spreads leases over several databases by account: a key is always
// served by the same partition's lease.Manager. Tokens are then per partition:
// they order the grants of one key (all from one partition), which is all
// fencing needs; tokens of different partitions are unrelated, so a guarded
// resource must only be written under leases of one partition. Router does
// not own the Managers: close them yourself.
type Router struct {
	parts     []*lease.Manager
	partition func(lease.Key) int
}

// NewRouter validates cfg. It does no I/O.
func NewRouter(cfg RouterConfig) (*Router, error) {
	if len(cfg.Partitions) == 0 {
		return nil, &ConfigError{Field: "Partitions", Reason: "empty"}
	}
	if slices.Contains(cfg.Partitions, nil) {
		return nil, &ConfigError{Field: "Partitions", Reason: "nil lease.Manager"}
	}
	r := &Router{parts: slices.Clone(cfg.Partitions), partition: cfg.Partition}
	if r.partition == nil {
		n := uint32(len(r.parts))
		r.partition = func(k lease.Key) int {
			h := fnv.New32a()
			_, _ = h.Write([]byte(k.AccountID))
			return int(h.Sum32() % n)
		}
	}
	return r, nil
}

// For returns the lease.Manager of key's partition. The key is validated first.
func (r *Router) For(key lease.Key) (*lease.Manager, error) {
	if err := key.Validate(); err != nil {
		return nil, err
	}
	i := r.partition(key)
	if i < 0 || i >= len(r.parts) {
		return nil, fmt.Errorf("leaseops: router: partition %d of %s is outside 0..%d", i, key, len(r.parts)-1)
	}
	return r.parts[i], nil
}

// Acquire is lease.Manager.Acquire on key's partition.
func (r *Router) Acquire(ctx context.Context, key lease.Key) (*lease.Lease, error) {
	m, err := r.For(key)
	if err != nil {
		return nil, err
	}
	return m.Acquire(ctx, key)
}

// Inspect is lease.Manager.Inspect on key's partition.
func (r *Router) Inspect(ctx context.Context, key lease.Key) (lease.Ownership, error) {
	m, err := r.For(key)
	if err != nil {
		return lease.Ownership{}, err
	}
	return m.Inspect(ctx, key)
}

// Release is lease.Manager.Release on key's partition.
func (r *Router) Release(ctx context.Context, key lease.Key, runID uuid.UUID) (lease.ReleaseResult, error) {
	m, err := r.For(key)
	if err != nil {
		return 0, err
	}
	return m.Release(ctx, key, runID)
}

// Run is lease.Manager.Run on key's partition.
func (r *Router) Run(ctx context.Context, key lease.Key, fn func(ctx context.Context, l *lease.Lease) error) error {
	m, err := r.For(key)
	if err != nil {
		return err
	}
	return m.Run(ctx, key, fn)
}

// Leases is the leases held through every partition, sorted by key.
func (r *Router) Leases() []lease.LocalLease {
	var out []lease.LocalLease
	for _, m := range r.parts {
		out = append(out, m.Leases()...)
	}
	slices.SortFunc(out, func(a, b lease.LocalLease) int { return compareKeys(a.Key, b.Key) })
	return out
}

func compareKeys(a, b lease.Key) int {
	switch {
	case a.AccountID < b.AccountID:
		return -1
	case a.AccountID > b.AccountID:
		return 1
	case a.SessionID < b.SessionID:
		return -1
	case a.SessionID > b.SessionID:
		return 1
	}
	return 0
}
