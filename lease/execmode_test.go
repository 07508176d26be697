package lease_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/internal/leasecheck"
	"github.com/fencekit/fencekit/lease"
)

// TestEveryStatementInEveryExecMode runs every statement the Manager sends
// (leasecheck.Statements: acquire, inspect, renew, batched renewal or
// the heartbeat (its creation, renewal, the listener's catch-up by epoch
// and its end at Close), markContended and the release NOTIFY, takeover
// and the displaced-run check, watch, the batched release at Close), in
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
