package fencetest

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/internal/netproxy"
	"github.com/fencekit/fencekit/lease"
)

// Fault controls the network between a pool from FaultyPool and the
// database. Its methods are safe for concurrent use.
type Fault struct {
	p *netproxy.Proxy
}

// FaultyPool opens an independent pool to the test database through a TCP
// proxy the test controls with the returned Fault. Both are closed when the
// test ends (the pool first). A lease.Manager on this pool, its renewals and
// its LISTEN connection all go through the proxy.
func FaultyPool(t testing.TB) (*pgxpool.Pool, *Fault) {
	t.Helper()
	SkipShort(t)
	cfg, err := pgxpool.ParseConfig(DatabaseURL())
	if err != nil {
		t.Fatalf("fencetest: bad TEST_DATABASE_URL: %v", err)
	}
	target := net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
	p, err := netproxy.New(target)
	if err != nil {
		t.Fatalf("fencetest: proxy to %s: %v", target, err)
	}
	t.Cleanup(func() { _ = p.Close() })
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = p.Host(), p.Port()
	cfg.ConnConfig.Fallbacks = nil
	return PoolFor(t, cfg), &Fault{p: p}
}

// Cut resets every connection and refuses new ones until Restore: the
// database looks down (the client gets errors at once).
func (f *Fault) Cut() { f.p.Cut() }

// Partition stops every byte in both directions until Restore while the
// connections stay open: requests hang and no error ever comes back, as in a
// network partition that only timeouts detect.
func (f *Fault) Partition() { f.p.Blackhole() }

// Restore ends Cut and Partition.
func (f *Fault) Restore() { f.p.Restore() }

// LoseLease makes the Manager holding l lose it, l's Manager being on this
// Fault's pool: it cuts the network until l's context ends, which happens at
// l's trust deadline (its renewals fail), restores the network and returns
// the cause, lease.ErrTrustExpired. The database still counts the lease as
// held until its expiry, one safety margin later: another Manager's
// AcquireWait gets it then, and Takeover at once. The test fails if l does
// not end within its remaining trust plus ten seconds.
func (f *Fault) LoseLease(t testing.TB, l *lease.Lease) error {
	t.Helper()
	f.Cut()
	defer f.Restore()
	wait := time.NewTimer(l.Remaining() + 10*time.Second)
	defer wait.Stop()
	select {
	case <-l.Done():
	case <-wait.C:
		t.Fatalf("fencetest: %s did not end after its connections were cut: is its Manager on this Fault's pool?", l)
	}
	return context.Cause(l.Context())
}
