package leaseops

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/google/uuid"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/internal/leaseopt"
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
// served by the same partition's lease.Manager. Its methods are the
// Manager's, each on the partition of its key (For), so code written
// against one Manager moves to a Router by changing the receiver; List
// reads across partitions. Tokens are then per partition: they order the
// grants of one key (all from one partition), which is all fencing needs;
// tokens of different partitions are unrelated, so a guarded resource must
// only be written under leases of one partition. Router does not own the
// Managers: read their Health and Close them yourself.
type Router struct {
	parts     []*lease.Manager
	partition func(lease.Key) int
}

// NewRouter validates cfg. It does no I/O.
func NewRouter(cfg RouterConfig) (*Router, error) {
	if len(cfg.Partitions) == 0 {
		return nil, &fence.ConfigError{Source: "leaseops", Field: "Partitions", Reason: "empty"}
	}
	if slices.Contains(cfg.Partitions, nil) {
		return nil, &fence.ConfigError{Source: "leaseops", Field: "Partitions", Reason: "nil lease.Manager"}
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

// index is the partition of key, checked against the number of partitions.
// A Router serves every method of lease.Leaser, as a Manager does.
var _ lease.Leaser = (*Router)(nil)

func (r *Router) index(key lease.Key) (int, error) {
	i := r.partition(key)
	if i < 0 || i >= len(r.parts) {
		return 0, fmt.Errorf("leaseops: router: partition %d of %s is outside 0..%d", i, key, len(r.parts)-1)
	}
	return i, nil
}

// For returns the lease.Manager of key's partition. The key is validated
// first (lease.ErrInvalidKey).
func (r *Router) For(key lease.Key) (*lease.Manager, error) {
	if err := key.Validate(); err != nil {
		return nil, err
	}
	i, err := r.index(key)
	if err != nil {
		return nil, err
	}
	return r.parts[i], nil
}

// Acquire is lease.Manager.Acquire on key's partition.
func (r *Router) Acquire(ctx context.Context, key lease.Key, opts ...lease.Option) (*lease.Lease, error) {
	m, err := r.For(key)
	if err != nil {
		return nil, err
	}
	return m.Acquire(ctx, key, opts...)
}

// AcquireWait is lease.Manager.AcquireWait on key's partition.
func (r *Router) AcquireWait(ctx context.Context, key lease.Key, opts ...lease.Option) (*lease.Lease, error) {
	m, err := r.For(key)
	if err != nil {
		return nil, err
	}
	return m.AcquireWait(ctx, key, opts...)
}

// Takeover is lease.Manager.Takeover on key's partition.
func (r *Router) Takeover(ctx context.Context, key lease.Key, opts ...lease.Option) (*lease.Lease, error) {
	m, err := r.For(key)
	if err != nil {
		return nil, err
	}
	return m.Takeover(ctx, key, opts...)
}

// Resume is lease.Manager.Resume on key's partition: a parked grant is
// resumed by a Manager of the partition that holds key's row.
func (r *Router) Resume(ctx context.Context, key lease.Key, runID uuid.UUID, opts ...lease.Option) (*lease.Lease, error) {
	m, err := r.For(key)
	if err != nil {
		return nil, err
	}
	return m.Resume(ctx, key, runID, opts...)
}

// Run is lease.Manager.Run on key's partition.
func (r *Router) Run(ctx context.Context, key lease.Key, fn func(ctx context.Context, l *lease.Lease) error, opts ...lease.Option) error {
	m, err := r.For(key)
	if err != nil {
		return err
	}
	return m.Run(ctx, key, fn, opts...)
}

// Renew is lease.Manager.Renew on key's partition.
func (r *Router) Renew(ctx context.Context, key lease.Key, runID uuid.UUID) (lease.Renewal, error) {
	m, err := r.For(key)
	if err != nil {
		return lease.Renewal{}, err
	}
	return m.Renew(ctx, key, runID)
}

// Release is lease.Manager.Release on key's partition.
func (r *Router) Release(ctx context.Context, key lease.Key, runID uuid.UUID) (lease.ReleaseResult, error) {
	m, err := r.For(key)
	if err != nil {
		return 0, err
	}
	return m.Release(ctx, key, runID)
}

// Watch is lease.Manager.Watch on key's partition.
func (r *Router) Watch(ctx context.Context, key lease.Key, opts ...lease.Option) (*lease.Watcher, error) {
	m, err := r.For(key)
	if err != nil {
		return nil, err
	}
	return m.Watch(ctx, key, opts...)
}

// Inspect is lease.Manager.Inspect on key's partition.
func (r *Router) Inspect(ctx context.Context, key lease.Key) (lease.Ownership, error) {
	m, err := r.For(key)
	if err != nil {
		return lease.Ownership{}, err
	}
	return m.Inspect(ctx, key)
}

// Revoke is lease.Manager.Revoke on key's partition.
func (r *Router) Revoke(ctx context.Context, key lease.Key, runID uuid.UUID) (lease.Revocation, error) {
	m, err := r.For(key)
	if err != nil {
		return lease.Revocation{}, err
	}
	return m.Revoke(ctx, key, runID)
}

// RevokeCurrent is lease.Manager.RevokeCurrent on key's partition.
func (r *Router) RevokeCurrent(ctx context.Context, key lease.Key) (lease.Revocation, error) {
	m, err := r.For(key)
	if err != nil {
		return lease.Revocation{}, err
	}
	return m.RevokeCurrent(ctx, key)
}

// List is lease.Manager.List across partitions, with the same options.
// With WithAccount it reads that account's partition only. Otherwise it
// reads the partitions in their RouterConfig order, each in (AccountID,
// SessionID) order as its database collates them, and fills a page of up
// to WithLimit keys from as many partitions as it takes; one statement per
// partition read. A full page may have more after it: call again with
// WithAfter its last key, and the listing continues in that key's
// partition (found from its account) and then the following ones. Keys are
// not ordered across partitions, and a page is not one snapshot: each
// partition is read at its own moment.
func (r *Router) List(ctx context.Context, opts ...lease.Option) ([]lease.Ownership, error) {
	set := leaseopt.Apply(leaseopt.List, opts)
	if set.Account != "" {
		// The partition depends on AccountID only; Manager.List validates
		// the account and the other options.
		i, err := r.index(lease.Key{AccountID: set.Account})
		if err != nil {
			return nil, err
		}
		return r.parts[i].List(ctx, opts...)
	}
	limit := lease.DefaultListLimit
	if set.LimitSet {
		limit = set.Limit
	}
	first := 0
	if after := (lease.Key{AccountID: set.AfterAccount, SessionID: set.AfterSession}); after != (lease.Key{}) {
		if err := after.Validate(); err != nil {
			return nil, fmt.Errorf("%w: WithAfter: %w", lease.ErrInvalidOption, err)
		}
		i, err := r.index(after)
		if err != nil {
			return nil, err
		}
		first = i
	}
	var out []lease.Ownership
	for i := first; i < len(r.parts); i++ {
		// Later options win: the page's remaining room, and from the
		// second partition on, its first key.
		o := append(slices.Clip(opts), lease.WithLimit(limit-len(out)))
		if i != first {
			o = append(o, lease.WithAfter(lease.Key{}))
		}
		page, err := r.parts[i].List(ctx, o...)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if len(out) >= limit {
			break
		}
	}
	return out, nil
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
