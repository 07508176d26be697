package promexport_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.uber.org/goleak"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/guards/memguard"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/internal/leasemetrics"
	"github.com/fencekit/fencekit/lease/leaseops"
	"github.com/fencekit/fencekit/sql/migrations"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func bg() context.Context { return context.Background() }

// TestPrometheusNames runs a workload that records into every lease
// instrument (and the in-process guard's), renders them through the
// OpenTelemetry Prometheus exporter and checks the exported metric families
// and label names.
func TestPrometheusNames(t *testing.T) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	require.NoError(t, err)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	defer func() { _ = mp.Shutdown(bg()) }()

	schema := fencetest.Schema(t, migrations.Lease)
	pool, fault := fencetest.FaultyPool(t)
	m, err := lease.New(lease.Config{Pool: pool, Schema: schema, TTL: time.Second, CallTimeout: 200 * time.Millisecond, MeterProvider: mp})
	require.NoError(t, err)
	defer m.Close()
	other, err := lease.New(lease.Config{Pool: fencetest.Pool(t), Schema: schema, MeterProvider: mp,
		Authorizer: lease.AuthorizerFunc(func(_ context.Context, k lease.Key) error {
			if k.SessionID == "denied" {
				return errors.New("no")
			}
			return nil
		})})
	require.NoError(t, err)
	defer other.Close()
	g, err := memguard.New(memguard.Config{MeterProvider: mp})
	require.NoError(t, err)
	j, err := leaseops.NewJanitor(leaseops.JanitorConfig{Pool: fencetest.Pool(t), Schema: schema, MeterProvider: mp})
	require.NoError(t, err)
	defer func() { _ = j.Close() }()

	k := lease.Key{AccountID: "acct", SessionID: fmt.Sprint(time.Now().UnixNano())}
	// A Run whose lease is lost while fn runs: acquired, held, lost, cancel
	// delay, overrun, renewal durations, released.
	var l *lease.Lease
	err = m.Run(bg(), k, func(ctx context.Context, held *lease.Lease) error {
		l = held
		if _, err := l.Renew(ctx); err != nil {
			return err
		}
		if err := g.Do(ctx, k.Resource("r"), func(context.Context) error { return nil }); err != nil {
			return err
		}
		fault.LoseLease(t, l)
		return nil
	})
	require.ErrorIs(t, err, lease.ErrTrustExpired)
	// Refusals, a wait that gives up, a wait that gets the key.
	_, err = other.Acquire(bg(), lease.Key{AccountID: "acct", SessionID: "denied"})
	require.ErrorIs(t, err, lease.ErrUnauthorized)
	l2, err := other.AcquireWait(bg(), k)
	require.NoError(t, err)
	_, err = other.Acquire(bg(), k)
	require.ErrorIs(t, err, lease.ErrHeld)
	wctx, cancel := context.WithTimeout(bg(), 50*time.Millisecond)
	_, err = other.AcquireWait(wctx, k)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, g.Do(l2.Context(), k.Resource("r"), func(context.Context) error { return nil }))
	stale := g.Fence(bg(), k.Resource("r"), l.Token(), func(context.Context) error { return nil }) // the lost run's token
	require.Error(t, stale)
	_, err = j.Sweep(bg())
	require.NoError(t, err)

	families, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]map[string]bool{} // family → label names
	for _, f := range families {
		labels := map[string]bool{}
		for _, mt := range f.GetMetric() {
			for _, lp := range mt.GetLabel() {
				labels[lp.GetName()] = true
			}
		}
		got[f.GetName()] = labels
	}
	names := make([]string, 0, len(got))
	for n := range got {
		if strings.HasPrefix(n, "fencekit_") {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	t.Logf("exported: %s", strings.Join(names, " "))

	want := map[string][]string{ // exported family → labels it must carry
		"fencekit_lease_acquired_total":            nil,
		"fencekit_lease_refused_total":             {"reason"},
		"fencekit_lease_lost_total":                {"cause"},
		"fencekit_lease_released_total":            {"result"},
		"fencekit_lease_held":                      nil,
		"fencekit_lease_acquire_duration_seconds":  {"error_type"},
		"fencekit_lease_wait_duration_seconds":     {"error_type"},
		"fencekit_lease_renewal_duration_seconds":  {"outcome"},
		"fencekit_lease_renewal_ttl_fraction":      {"outcome"},
		"fencekit_lease_loss_cancel_delay_seconds": {"cause"},
		"fencekit_lease_run_overrun_seconds":       {"cause"},
		"fencekit_lease_janitor_deleted_total":     {"table"},
		"fencekit_guard_accepted_total":            {"guard"},
		"fencekit_guard_stale_total":               {"guard"},
		"fencekit_guard_token_gap":                 {"guard"},
	}
	for fam, labels := range want {
		have, ok := got[fam]
		require.True(t, ok, "no family %s among %v", fam, names)
		for _, l := range labels {
			require.True(t, have[l], "%s has no label %q (labels %v)", fam, l, have)
		}
	}
	// Every lease instrument the package names reaches Prometheus.
	for _, n := range []string{leasemetrics.Acquired, leasemetrics.Refused, leasemetrics.Lost, leasemetrics.Released,
		leasemetrics.Held, leasemetrics.AcquireDuration, leasemetrics.WaitDuration, leasemetrics.RenewalDuration,
		leasemetrics.RenewalTTLFraction, leasemetrics.LossCancelDelay, leasemetrics.RunOverrun, leasemetrics.JanitorDeleted,
		leasemetrics.HeartbeatStarted} {
		prefix := strings.ReplaceAll(n, ".", "_")
		found := false
		for _, e := range names {
			found = found || strings.HasPrefix(e, prefix)
		}
		require.True(t, found, "instrument %s exported under no name starting %s", n, prefix)
	}
}
