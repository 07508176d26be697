package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/internal/netproxy"
	"github.com/fencekit/fencekit/lease"
)

// interrupted records the statements whose context ended while they ran:
// pgx closes such a connection and sends a cancel request for it.
type interrupted struct {
	mu   sync.Mutex
	sqls []string
}

type sqlKey struct{}

func (r *interrupted) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, sqlKey{}, d.SQL)
}

func (r *interrupted) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	if errors.Is(d.Err, context.Canceled) || errors.Is(d.Err, context.DeadlineExceeded) {
		sql, _ := ctx.Value(sqlKey{}).(string)
		r.mu.Lock()
		r.sqls = append(r.sqls, fmt.Sprintf("%.60s: %v", sql, d.Err))
		r.mu.Unlock()
	}
}

// TestCloseDoesNotInterruptStatements: with 60 ms of latency each way, the
// heartbeat, the listener and a watcher each have a statement in flight
// much of the time; Close lets them finish (each is bounded by CallTimeout)
// instead of cancelling them, so pgx closes no connection and sends no
// cancel request (which PgBouncer 1.18 to 1.20 can exit on).
func TestCloseDoesNotInterruptStatements(t *testing.T) {
	e := newEnv(t)
	rec := &interrupted{}
	pool, proxy := proxiedPoolWith(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = rec })
	for i := range 6 {
		m, err := lease.New(heartbeat(lease.Config{Pool: pool, Schema: e.schema, TTL: 3 * time.Second, RenewEvery: 150 * time.Millisecond, CallTimeout: time.Second}))
		require.NoError(t, err)
		k := uniqueKey(t)
		l, err := m.Acquire(bg(), k)
		require.NoError(t, err)
		w, err := m.Watch(bg(), uniqueKey(t)) // the listener and a watcher's reads
		require.NoError(t, err)
		proxy.SetLatency(netproxy.Both, 60*time.Millisecond)
		time.Sleep(time.Duration(300+97*i) * time.Millisecond)
		start := time.Now()
		require.NoError(t, m.Close())
		// In-flight statements, then the releases and the heartbeat's end:
		// three statement bounds at most.
		require.Less(t, time.Since(start), 3*time.Second, "Close waits for statements in flight, within their bound")
		require.ErrorIs(t, l.Err(), lease.ErrClosed)
		w.Close()
		proxy.SetLatency(netproxy.Both, 0)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Empty(t, rec.sqls, "statements interrupted by Close")
}
