package lease_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
)

// inflight is a pgx tracer that records how many renewal batch statements
// were in flight at once on one pool.
type inflight struct {
	now, peak atomic.Int64
	total     atomic.Int64
}

type renewStmtKey struct{}

func isRenewBatch(sql string) bool {
	return strings.Contains(sql, "unnest(") && strings.Contains(sql, "renewed_at")
}

func (f *inflight) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if !isRenewBatch(d.SQL) {
		return ctx
	}
	f.total.Add(1)
	n := f.now.Add(1)
	for {
		p := f.peak.Load()
		if n <= p || f.peak.CompareAndSwap(p, n) {
			break
		}
	}
	return context.WithValue(ctx, renewStmtKey{}, true)
}

func (f *inflight) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if ctx.Value(renewStmtKey{}) != nil {
		f.now.Add(-1)
	}
}

// TestParallelRenewalKeepsEveryLease: two Managers on independent pools
// each hold 600 leases of one account; with 50 leases per statement every
// renewal round is a dozen batches, sent several at once on separate
// connections. Every lease stays held through several periods, each row
// keeps its run_id and token and is renewed, nothing is reported lost,
// and each Manager had more than one batch in flight at a time (the
// sequential renewer never has).
func TestParallelRenewalKeepsEveryLease(t *testing.T) {
	e := newEnv(t)
	const perManager, managers = 600, 2
	const renewEvery = 500 * time.Millisecond
	acct := uuid.NewString()
	type side struct {
		m      *lease.Manager
		ev     *lease.Events
		tr     *inflight
		leases []*lease.Lease
	}
	sides := make([]*side, managers)
	for i := range sides {
		tr := &inflight{}
		pool := fencetest.PoolWith(t, fencetest.DatabaseURL(), func(c *pgxpool.Config) {
			c.MaxConns = 8
			c.ConnConfig.Tracer = tr
		})
		m, ev, err := lease.NewObserved(lease.Config{Pool: pool, Schema: e.schema, TTL: 4 * time.Second, RenewEvery: renewEvery,
			Renewal: lease.RenewalPerLease}) // parallel batches exist in per-lease mode only
		require.NoError(t, err)
		lease.SetRenewBatchSize(m, 50)
		t.Cleanup(func() { _ = m.Close() })
		sides[i] = &side{m: m, ev: ev, tr: tr, leases: make([]*lease.Lease, perManager)}
	}
	// Interleaved keys: the two Managers' batches cover overlapping key
	// ranges, so their row locks interleave too.
	var wg sync.WaitGroup
	var fail atomic.Value
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < managers*perManager; i += 8 {
				s := sides[i%managers]
				l, err := s.m.Acquire(bg(), lease.Key{AccountID: acct, SessionID: fmt.Sprintf("s%05d", i)})
				if err != nil {
					fail.CompareAndSwap(nil, err)
					return
				}
				s.leases[i/managers] = l
			}
		})
	}
	wg.Wait()
	if err, _ := fail.Load().(error); err != nil {
		t.Fatal(err)
	}
	var since time.Time
	require.NoError(t, e.raw.QueryRow(bg(), `SELECT clock_timestamp()`).Scan(&since))
	// Every row renewed at least once more than a full period after the
	// last acquisition: each lease went through two renewal rounds or more.
	q := fmt.Sprintf(`SELECT count(*) FROM %q.fencekit_leases WHERE account_id = $1 AND renewed_at > $2`, e.schema)
	waitFor(t, 30*time.Second, "every lease renewed after a full period", func() bool {
		var n int
		require.NoError(t, e.raw.QueryRow(bg(), q, acct, since.Add(renewEvery)).Scan(&n))
		return n == managers*perManager
	})
	for i, s := range sides {
		for _, l := range s.leases {
			require.NoError(t, l.Err(), "manager %d lease %s", i, l.Key())
			r, ok := e.row(l.Key())
			require.True(t, ok)
			require.Equal(t, l.RunID(), r.RunID)
			require.Equal(t, int64(l.Token()), r.Token)
			require.False(t, r.Released)
		}
		batches, _, lost := s.ev.Snapshot()
		require.Empty(t, lost, "manager %d lost leases", i)
		for _, b := range batches {
			require.LessOrEqual(t, b, 50)
		}
		require.GreaterOrEqual(t, s.tr.peak.Load(), int64(2), "manager %d never had two renewal batches in flight (%d statements)", i, s.tr.total.Load())
		t.Logf("manager %d: %d renewal statements, at most %d in flight", i, s.tr.total.Load(), s.tr.peak.Load())
	}
	for i, s := range sides {
		require.NoError(t, s.m.Close(), "manager %d", i)
	}
	var held int
	require.NoError(t, e.raw.QueryRow(bg(), fmt.Sprintf(`SELECT count(*) FROM %q.fencekit_leases WHERE account_id = $1 AND released_at IS NULL`, e.schema), acct).Scan(&held))
	require.Zero(t, held, "Close released every lease")
}
