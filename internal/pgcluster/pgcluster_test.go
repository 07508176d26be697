package pgcluster_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fencekit/fencekit/internal/pgcluster"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func clusters(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("pg_lsclusters", "--no-header").CombinedOutput()
	require.NoError(t, err, "%s", out)
	return string(out)
}

// deadPID is a process id no process can have.
func deadPID(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	require.NoError(t, err)
	var max int
	_, err = fmt.Sscan(strings.TrimSpace(string(b)), &max)
	require.NoError(t, err)
	return max + 1
}

// TestNewSweepsClustersOfDeadRuns: a cluster left by a run whose process
// is gone is dropped by the next New; the new cluster accepts connections,
// and is itself dropped when its test ends.
func TestNewSweepsClustersOfDeadRuns(t *testing.T) {
	pgcluster.Require(t)
	stale := fmt.Sprintf("%s%d_stale%d", pgcluster.NamePrefix, deadPID(t), time.Now().UnixNano()%1e6)
	out, err := exec.Command("pg_createcluster", pgcluster.Version, stale, "-p", "65001", "--", "--no-sync").CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Cleanup(func() { _ = exec.Command("pg_dropcluster", pgcluster.Version, stale).Run() })
	require.Contains(t, clusters(t), stale)

	var name string
	t.Run("cluster", func(t *testing.T) {
		c := pgcluster.New(t, pgcluster.Options{})
		name = c.Name
		require.NotContains(t, clusters(t), stale, "the stale cluster was swept")
		var one int
		require.NoError(t, c.Pool("postgres").QueryRow(context.Background(), "SELECT 1").Scan(&one))
		require.Equal(t, 1, one)
		require.Contains(t, clusters(t), c.Name)
	})
	require.NotEmpty(t, name)
	require.NotContains(t, clusters(t), name, "dropped when its test ended")
}
