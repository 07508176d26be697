package pgbouncer

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/internal/leasecheck"
	"github.com/fencekit/fencekit/internal/obs/obstest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// row is one deployment: a pool mode, the pgx exec mode of the pools, and
// whether the Manager gets a direct LISTEN connection.
type row struct {
	pool    string
	exec    pgx.QueryExecMode
	listen  bool // ListenConnString = the database, directly
	deliver bool // the Manager's notifications are expected to arrive
}

func (r row) name() string {
	n := r.pool + "/" + fencetest.ExecModeName(r.exec)
	if r.listen {
		n += "/direct-listen"
	}
	return n
}

var rows = []row{
	{pool: fencetest.PgBouncerSession, exec: pgx.QueryExecModeCacheStatement, deliver: true},
	{pool: fencetest.PgBouncerSession, exec: pgx.QueryExecModeSimpleProtocol, deliver: true},
	{pool: fencetest.PgBouncerTransaction, exec: pgx.QueryExecModeExec, deliver: false},
	{pool: fencetest.PgBouncerTransaction, exec: pgx.QueryExecModeSimpleProtocol, deliver: false},
	{pool: fencetest.PgBouncerTransaction, exec: pgx.QueryExecModeExec, listen: true, deliver: true},
}

// TestLeaseStatementsThroughPgBouncer runs every Manager statement
// (leasecheck.Statements) through PgBouncer in each row's pool and exec
// mode, in both renewal modes. Without a direct listen connection in transaction pooling the
// notifications are lost, and the scenario's waits are met by the polling
// fallback (FallbackPoll 1 s) instead.
func TestLeaseStatementsThroughPgBouncer(t *testing.T) {
	schema := fencetest.Schema(t, migrations.Lease)
	for _, r := range rows {
		for _, renewal := range []lease.RenewalMode{lease.RenewalHeartbeat, lease.RenewalPerLease} {
			t.Run(r.name()+"/"+renewal.String(), func(t *testing.T) {
				url := fencetest.PgBouncer(t, r.pool)
				leasecheck.Statements(t, leasecheck.Setup{
					Schema: schema,
					Pool:   func(t testing.TB) *pgxpool.Pool { return fencetest.PoolAt(t, url, r.exec) },
					Config: func(cfg *lease.Config) {
						cfg.Renewal = renewal
						if r.listen {
							cfg.ListenConnString = fencetest.DatabaseURL()
						}
					},
				})
			})
		}
	}
}

// TestListenerDeliveryThroughPgBouncer: the Manager's Health says whether
// its notifications arrive. Session pooling and a direct listen connection
// deliver; transaction pooling does not, and the Manager says so once
// (Warn), counts it and polls — never silently.
func TestListenerDeliveryThroughPgBouncer(t *testing.T) {
	schema := fencetest.Schema(t, migrations.Lease)
	for _, r := range rows {
		t.Run(r.name(), func(t *testing.T) {
			url := fencetest.PgBouncer(t, r.pool)
			mt := obstest.NewMeter(t)
			logs, logger := obstest.NewLogs()
			cfg := lease.Config{
				Pool: fencetest.PoolAt(t, url, r.exec), Schema: schema, CallTimeout: time.Second,
				WaitPoll: 500 * time.Millisecond, MeterProvider: mt.Provider, Logger: logger,
			}
			if r.listen {
				cfg.ListenConnString = fencetest.DatabaseURL()
			}
			m, err := lease.New(cfg)
			require.NoError(t, err)
			defer func() { require.NoError(t, m.Close()) }()
			l, err := m.Acquire(context.Background(), lease.Key{AccountID: "pgbouncer", SessionID: t.Name()})
			require.NoError(t, err)
			defer func() { _, _ = l.Release(context.Background()) }()

			want := lease.ListenerDelivering
			if !r.deliver {
				want = lease.ListenerNotDelivering
			}
			var h lease.Health
			deadline := time.Now().Add(15 * time.Second)
			for {
				h = m.Health(context.Background())
				// Three probes decide: one lost or delivered by chance is
				// not enough.
				if h.Listener == want && (h.ProbesLost >= 3 || (r.deliver && h.ProbesLost == 0 && !h.LastDelivered.IsZero() && time.Since(h.ListenerSince) > 1500*time.Millisecond)) {
					break
				}
				require.True(t, time.Now().Before(deadline), "listener %s (probes lost %d), want %s", h.Listener, h.ProbesLost, want)
				time.Sleep(50 * time.Millisecond)
			}
			require.True(t, h.Ready, "problems: %v", h.Problems)
			require.Equal(t, r.listen, h.ListenerDedicated)
			var warns int
			for _, rec := range logs.AtLeast(slog.LevelWarn) {
				if strings.Contains(rec.Message, "does not receive notifications") {
					warns++
				}
			}
			fallback := obstest.Value(mt.Collect(), "fencekit.lease.listener.fallback", nil)
			if r.deliver {
				require.Zero(t, warns)
				require.Zero(t, fallback)
				require.Empty(t, h.Warnings)
			} else {
				require.Equal(t, 1, warns, "said once")
				require.EqualValues(t, 1, fallback)
				require.Len(t, h.Warnings, 1)
			}
		})
	}
}
