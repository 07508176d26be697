package lease_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/guards/memguard"
	"github.com/fencekit/fencekit/internal/obs/obstest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/internal/leasemetrics"
	"github.com/fencekit/fencekit/lease/leaseops"
)

// TestMetricsAndLogsHappyPath: grants, refusals (held, unauthorized),
// renewals and releases are counted with bounded attributes, the held gauge
// follows the leases, and nothing is logged above Debug.
func TestMetricsAndLogsHappyPath(t *testing.T) {
	e := newEnv(t)
	mt := obstest.NewMeter(t)
	logs, logger := obstest.NewLogs()
	m := e.manager(lease.Config{MeterProvider: mt.Provider, Logger: logger})
	denied := e.manager(lease.Config{MeterProvider: mt.Provider, Logger: logger,
		Authorizer: lease.AuthorizerFunc(func(context.Context, lease.Key) error { return errors.New("no") })})

	var ls []*lease.Lease
	for range 3 {
		l, err := m.Acquire(bg(), uniqueKey(t))
		require.NoError(t, err)
		ls = append(ls, l)
	}
	_, err := m.Acquire(bg(), ls[0].Key())
	require.ErrorIs(t, err, lease.ErrHeld)
	_, err = denied.Acquire(bg(), uniqueKey(t))
	require.ErrorIs(t, err, lease.ErrUnauthorized)
	require.NoError(t, errOf(ls[1].Renew(bg())))

	pts := mt.Collect()
	require.EqualValues(t, 3, obstest.Value(pts, leasemetrics.Acquired, nil))
	require.EqualValues(t, 1, obstest.Value(pts, leasemetrics.Refused, map[string]string{"reason": leasemetrics.ReasonHeld}))
	require.EqualValues(t, 1, obstest.Value(pts, leasemetrics.Refused, map[string]string{"reason": leasemetrics.ReasonUnauthorized}))
	require.EqualValues(t, 3, obstest.Value(pts, leasemetrics.Held, nil), "held gauge (both Managers)")
	ok := map[string]string{"outcome": "ok"}
	require.GreaterOrEqual(t, obstest.Count(pts, leasemetrics.RenewalDuration, ok), uint64(1))
	for _, p := range obstest.Find(pts, leasemetrics.RenewalTTLFraction, ok) {
		require.Greater(t, p.Min, 0.0)
		require.Less(t, p.Max, 1.0, "a renewal round trip took longer than the TTL")
	}

	for _, l := range ls {
		res, err := l.Release(bg())
		require.NoError(t, err)
		require.Equal(t, lease.ReleaseDone, res)
	}
	pts = mt.Collect()
	require.EqualValues(t, 0, obstest.Value(pts, leasemetrics.Held, nil))
	require.EqualValues(t, 3, obstest.Value(pts, leasemetrics.Released, map[string]string{"result": "released"}))
	require.Empty(t, obstest.Find(pts, leasemetrics.Lost, nil), "no lease was lost")

	require.Empty(t, logs.AtLeast(slog.LevelInfo), "the happy path logs at Debug only")
	require.Len(t, logs.Messages("lease acquired"), 3)
	require.Len(t, logs.Messages("lease released"), 3)
	require.Len(t, logs.Messages("lease acquire unauthorized"), 1)
}

// TestMetricsLossCauses: each way of losing a lease is counted under its
// cause, with the delay until the context ended, and logged once at Warn.
func TestMetricsLossCauses(t *testing.T) {
	short := func(pool lease.Config) lease.Config {
		pool.TTL, pool.SafetyMargin, pool.RenewEvery = time.Second, 200*time.Millisecond, 250*time.Millisecond
		return pool
	}
	t.Run("renewal_rejected", func(t *testing.T) {
		e := newEnv(t)
		mt := obstest.NewMeter(t)
		logs, logger := obstest.NewLogs()
		m := e.manager(lease.Config{MeterProvider: mt.Provider, Logger: logger})
		l, err := m.Acquire(bg(), uniqueKey(t))
		require.NoError(t, err)
		e.expire(l.Key())
		require.ErrorIs(t, errOf(l.Renew(bg())), lease.ErrLost)
		assertLoss(t, mt, logs, leasemetrics.CauseRenewalRejected)
		// Per-lease: the renew statement was refused. Heartbeat: the
		// heartbeat statement succeeded and reported this run as revoked.
		rejected := 1
		if lease.HeartbeatMode(m) {
			rejected = 0
		}
		require.EqualValues(t, rejected, obstest.Count(mt.Collect(), leasemetrics.RenewalDuration, map[string]string{"outcome": "rejected"}))
	})
	t.Run("database_error", func(t *testing.T) {
		e := newEnv(t)
		pool, proxy := proxiedPool(t)
		defer proxy.Restore()
		mt := obstest.NewMeter(t)
		logs, logger := obstest.NewLogs()
		m := e.manager(short(lease.Config{Pool: pool, MeterProvider: mt.Provider, Logger: logger}))
		l, err := m.Acquire(bg(), uniqueKey(t))
		require.NoError(t, err)
		proxy.Cut() // renewals fail at once
		<-l.Done()
		require.ErrorIs(t, l.Err(), lease.ErrTrustExpired)
		assertLoss(t, mt, logs, leasemetrics.CauseDatabaseError)
		require.Positive(t, obstest.Count(mt.Collect(), leasemetrics.RenewalDuration, map[string]string{"outcome": "error"}))
		require.NotEmpty(t, logs.Messages("lease renewal failed; leases stay trusted until their deadlines"))
	})
	t.Run("trust_deadline", func(t *testing.T) {
		e := newEnv(t)
		// The renewer is late, as in a paused process: once stalled, taking
		// a connection from the pool blocks, ignoring the context, until
		// the test ends. No renewal statement fails before the deadline.
		var stalled atomic.Bool
		resume := make(chan struct{})
		pool := fencetest.PoolWith(t, fencetest.DatabaseURL(), func(c *pgxpool.Config) {
			c.PrepareConn = func(context.Context, *pgx.Conn) (bool, error) {
				if stalled.Load() {
					<-resume
				}
				return true, nil
			}
		})
		mt := obstest.NewMeter(t)
		logs, logger := obstest.NewLogs()
		m := e.manager(short(lease.Config{Pool: pool, MeterProvider: mt.Provider, Logger: logger}))
		t.Cleanup(func() { close(resume) }) // before the Manager's Close
		l, err := m.Acquire(bg(), uniqueKey(t))
		require.NoError(t, err)
		stalled.Store(true)
		<-l.Done()
		require.ErrorIs(t, l.Err(), lease.ErrTrustExpired)
		assertLoss(t, mt, logs, leasemetrics.CauseTrustDeadline)
	})
}

func assertLoss(t *testing.T, mt *obstest.Meter, logs *obstest.Logs, cause string) {
	t.Helper()
	c := map[string]string{"cause": cause}
	// The context is cancelled first, then the loss is recorded and logged
	// by the same goroutine: wait for the log record.
	waitFor(t, 5*time.Second, "the loss log", func() bool { return len(logs.Messages("lease lost")) > 0 })
	pts := mt.Collect()
	require.EqualValues(t, 1, obstest.Value(pts, leasemetrics.Lost, nil), "exactly one loss")
	require.EqualValues(t, 1, obstest.Value(pts, leasemetrics.Lost, c))
	hs := obstest.Find(pts, leasemetrics.LossCancelDelay, c)
	require.Len(t, hs, 1)
	require.EqualValues(t, 1, hs[0].Count)
	require.GreaterOrEqual(t, hs[0].Min, 0.0)
	require.Less(t, hs[0].Max, 0.5, "context ended %.3fs after the loss", hs[0].Max)
	require.EqualValues(t, 0, obstest.Value(pts, leasemetrics.Held, nil))
	warns := logs.Messages("lease lost")
	require.Len(t, warns, 1)
	require.Equal(t, slog.LevelWarn, warns[0].Level)
	require.Equal(t, cause, warns[0].Attrs["cause"])
}

// TestMetricRunOverrun: Run records how long fn kept running after its
// lease ended by loss.
func TestMetricRunOverrun(t *testing.T) {
	e := newEnv(t)
	mt := obstest.NewMeter(t)
	m := e.manager(lease.Config{MeterProvider: mt.Provider})
	k := uniqueKey(t)
	err := m.Run(bg(), k, func(ctx context.Context, l *lease.Lease) error {
		e.expire(k) //nolint:contextcheck // test helper on its own context
		require.ErrorIs(t, errOf(l.Renew(ctx)), lease.ErrLost)
		<-ctx.Done()
		return ctx.Err()
	})
	require.ErrorIs(t, err, lease.ErrLost)
	hs := obstest.Find(mt.Collect(), leasemetrics.RunOverrun, map[string]string{"cause": leasemetrics.CauseRenewalRejected})
	require.Len(t, hs, 1)
	require.EqualValues(t, 1, hs[0].Count)
	require.GreaterOrEqual(t, hs[0].Min, 0.0)
}

// TestMetricAttributesCarryNoIdentifiers: after a workload touching every
// instrument of the lease package and a guard, no attribute value equals a
// key, run id, token or resource used, and attribute keys come from the
// documented small set.
func TestMetricAttributesCarryNoIdentifiers(t *testing.T) {
	e := newEnv(t)
	mt := obstest.NewMeter(t)
	m := e.manager(lease.Config{MeterProvider: mt.Provider})
	denied := e.manager(lease.Config{MeterProvider: mt.Provider,
		Authorizer: lease.AuthorizerFunc(func(context.Context, lease.Key) error { return errors.New("no") })})
	g, err := memguard.New(memguard.Config{MeterProvider: mt.Provider})
	require.NoError(t, err)
	j, err := leaseops.NewJanitor(leaseops.JanitorConfig{Pool: e.raw, Schema: e.schema, MeterProvider: mt.Provider})
	require.NoError(t, err)
	defer func() { _ = j.Close() }()

	secret := map[string]bool{}
	note := func(s string) { secret[s] = true }
	for i := range 5 {
		k := lease.Key{AccountID: "acct-" + uuid.NewString(), SessionID: "sess-" + uuid.NewString()}
		note(k.AccountID)
		note(k.SessionID)
		note(k.String())
		resource := fmt.Sprintf("res-%d-%s", i, uuid.NewString())
		note(resource)
		err := m.Run(bg(), k, func(ctx context.Context, l *lease.Lease) error {
			note(l.RunID().String())
			note(strconv.FormatInt(int64(l.Token()), 10))
			if _, err := m.Acquire(ctx, k); !errors.Is(err, lease.ErrHeld) {
				return fmt.Errorf("second acquire: %w", err)
			}
			if _, err := l.Renew(ctx); err != nil {
				return err
			}
			if err := g.Fence(ctx, resource, l.Token()+1, func(context.Context) error { return nil }); err != nil {
				return err
			}
			if err := g.Fence(ctx, resource, l.Token(), func(context.Context) error { return nil }); !isStale(err) {
				return fmt.Errorf("stale write: %w", err)
			}
			if i == 0 { // one loss
				e.expire(k) //nolint:contextcheck // test helper on its own context
				if _, err := l.Renew(ctx); !errors.Is(err, lease.ErrLost) {
					return fmt.Errorf("renew after expiry: %w", err)
				}
			}
			return nil
		})
		if i == 0 {
			require.ErrorIs(t, err, lease.ErrLost)
		} else {
			require.NoError(t, err)
		}
		_, err = denied.Acquire(bg(), k)
		require.ErrorIs(t, err, lease.ErrUnauthorized)
	}
	_, err = j.Sweep(bg())
	require.NoError(t, err)

	// AcquireWait: one grant, one that gives up; a takeover.
	wk := lease.Key{AccountID: "acct-" + uuid.NewString(), SessionID: "sess-" + uuid.NewString()}
	note(wk.AccountID)
	note(wk.SessionID)
	note(wk.String())
	lw, err := m.AcquireWait(bg(), wk)
	require.NoError(t, err)
	note(lw.RunID().String())
	note(strconv.FormatInt(int64(lw.Token()), 10))
	wctx, cancel := context.WithTimeout(bg(), 100*time.Millisecond)
	_, err = m.AcquireWait(wctx, wk)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	lt, err := m.Takeover(bg(), wk, lease.WithHolder("desktop"))
	require.NoError(t, err)
	note(lt.RunID().String())
	note(strconv.FormatInt(int64(lt.Token()), 10))
	_, err = lt.Release(bg())
	require.NoError(t, err)

	allowed := map[string]bool{"reason": true, "cause": true, "outcome": true, "result": true, "guard": true, "table": true, "error.type": true}
	pts := mt.Collect()
	names := map[string]bool{}
	for _, p := range pts {
		names[p.Name] = true
		for k, v := range p.Attrs {
			require.True(t, allowed[k], "metric %s has attribute key %q", p.Name, k)
			require.False(t, secret[v], "metric %s attribute %s=%q carries an identifier", p.Name, k, v)
		}
	}
	for _, n := range []string{leasemetrics.Acquired, leasemetrics.Refused, leasemetrics.Lost, leasemetrics.Released,
		leasemetrics.Held, leasemetrics.RenewalDuration, leasemetrics.RenewalTTLFraction, leasemetrics.LossCancelDelay,
		leasemetrics.RunOverrun, leasemetrics.JanitorDeleted, leasemetrics.AcquireDuration, leasemetrics.WaitDuration, "fencekit.guard.accepted", "fencekit.guard.stale", "fencekit.guard.token_gap"} {
		require.True(t, names[n], "workload produced no %s", n)
	}
	require.EqualValues(t, 5, obstest.Value(pts, "fencekit.guard.stale", map[string]string{"guard": "memory"}))
	require.Positive(t, obstest.Count(pts, leasemetrics.AcquireDuration, map[string]string{"error.type": leasemetrics.ErrorTypeHeld}))
	require.Positive(t, obstest.Count(pts, leasemetrics.WaitDuration, map[string]string{"error.type": leasemetrics.ErrorTypeDeadlineExceeded}))
	for _, p := range obstest.Find(pts, leasemetrics.WaitDuration, nil) {
		if _, failed := p.Attrs["error.type"]; !failed {
			require.EqualValues(t, 1, p.Count, "one AcquireWait granted")
		}
	}
	gap := obstest.Find(pts, "fencekit.guard.token_gap", map[string]string{"guard": "memory"})
	require.Len(t, gap, 1)
	require.EqualValues(t, 1, gap[0].Min, "gap = highest − presented")
	require.EqualValues(t, 1, gap[0].Max)
}

// TestLeasesAndStatusHandler: Manager.Leases lists exactly the live leases with their
// remaining trust; the handler serves them as JSON.
func TestLeasesAndStatusHandler(t *testing.T) {
	e := newEnv(t)
	m := e.manager(lease.Config{})
	require.Empty(t, m.Leases())
	a, err := m.Acquire(bg(), lease.Key{AccountID: "a-" + uuid.NewString(), SessionID: "s"})
	require.NoError(t, err)
	b, err := m.Acquire(bg(), lease.Key{AccountID: "b-" + uuid.NewString(), SessionID: "s"})
	require.NoError(t, err)
	held := m.Leases()
	require.Len(t, held, 2)
	require.Equal(t, a.Key(), held[0].Key, "sorted by key")
	require.Equal(t, a.RunID(), held[0].RunID)
	require.Equal(t, a.Token(), held[0].Token)
	require.Positive(t, held[0].Remaining)
	require.LessOrEqual(t, held[0].Remaining, m.TrustWindow())
	require.Equal(t, a.TrustDeadline(), held[0].TrustDeadline)

	_, err = b.Release(bg())
	require.NoError(t, err)
	held = m.Leases()
	require.Len(t, held, 1)
	require.Equal(t, a.RunID(), held[0].RunID)

	srv := httptest.NewServer(leaseops.StatusHandler(m))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var rep leaseops.StatusReport
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&rep))
	require.InDelta(t, m.TTL().Seconds(), rep.TTLSeconds, 1e-9)
	require.Len(t, rep.Leases, 1)
	require.Equal(t, a.Key().AccountID, rep.Leases[0].AccountID)
	require.Equal(t, int64(a.Token()), rep.Leases[0].Token)
	require.Positive(t, rep.Leases[0].RemainingSeconds)

	post, err := http.Post(srv.URL, "text/plain", nil)
	require.NoError(t, err)
	post.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, post.StatusCode)
}

func isStale(err error) bool { _, ok := fence.IsStale(err); return ok }
