package lease_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/internal/leasecheck"
	"github.com/fencekit/fencekit/lease"
)

// TestEveryStatementInEveryExecMode runs every statement the Manager sends
// (leasecheck.Statements: acquire, inspect, renew, batched renewal or
// the heartbeat (its creation, renewal, the listener's catch-up by epoch
// and its end at Close), markContended and the release NOTIFY, takeover
// and the displaced-run check, watch, park and resume, the batched release
// at Close), in
// both renewal modes, on pools in each pgx
// QueryExecMode, including exec and simple_protocol, in which every
// parameter travels in text format (what connection poolers require).
// TEST_PGX_EXEC_MODES narrows the modes.
func TestEveryStatementInEveryExecMode(t *testing.T) {
	e := newEnv(t)
	for _, mode := range fencetest.ExecModesToTest(t) {
		for _, renewal := range []lease.RenewalMode{lease.RenewalHeartbeat, lease.RenewalPerLease} {
			t.Run(fencetest.ExecModeName(mode)+"/"+renewal.String(), func(t *testing.T) {
				leasecheck.Statements(t, leasecheck.Setup{
					Schema: e.schema,
					Pool:   func(t testing.TB) *pgxpool.Pool { return fencetest.PoolInMode(t, mode) },
					Config: func(cfg *lease.Config) { cfg.Renewal = renewal },
				})
			})
		}
	}
}

// The shared acquire and release statements (concurrent callers of one
// Manager) in every exec mode and renewal mode: they bind arrays, which the
// text modes send as text.
func TestSharedStatementsInEveryExecMode(t *testing.T) {
	e := newEnv(t)
	for _, mode := range fencetest.ExecModesToTest(t) {
		for _, renewal := range []lease.RenewalMode{lease.RenewalHeartbeat, lease.RenewalPerLease} {
			t.Run(fencetest.ExecModeName(mode)+"/"+renewal.String(), func(t *testing.T) {
				m := e.manager(lease.Config{Pool: fencetest.PoolInMode(t, mode), Renewal: renewal})
				var wg sync.WaitGroup
				for i := range 16 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for j := range 4 {
							k := lease.Key{AccountID: "acct-" + t.Name(), SessionID: fmt.Sprintf("s%d-%d", i, j)}
							l, err := m.Acquire(bg(), k, lease.WithHolder("sharer"))
							if err != nil {
								t.Errorf("acquire %v: %v", k, err)
								return
							}
							if rr, err := l.Release(bg()); err != nil || rr != lease.ReleaseDone {
								t.Errorf("release %v: %v %v", k, rr, err)
								return
							}
						}
					}()
				}
				wg.Wait()
				require.Positive(t, lease.SharedGrants(m), "no shared acquire statement ran")
				require.Positive(t, lease.SharedReleases(m), "no shared release statement ran")
			})
		}
	}
}
