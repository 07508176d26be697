//go:build soak

// The soak is built only with -tags soak (make chaos), so regular test runs
// neither skip it nor pay for it.

package chaos

import (
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var flagSoak = flag.Duration("chaos.soak", 0, "length of TestChaosSoak")

// TestChaosSoak is the long run behind `make chaos`: one run of
// -chaos.soak with a fresh seed (or -chaos.seed), summary printed.
func TestChaosSoak(t *testing.T) {
	require.Positive(t, *flagSoak, "set -chaos.soak=10m (make chaos CHAOS_DURATION=10m)")
	seed := *flagSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	faults := faultsFromFlags(t)
	if !strings.Contains(*flagFaults, "-"+string(FaultPGRestart)) {
		faults[FaultPGRestart] = true // on a private cluster: on by default in the soak
	}
	res := runAndCheck(t, Config{Seed: seed, Duration: *flagSoak, Faults: faults, Lease: *flagLease, Procs: *flagProcs, Logf: t.Logf})
	fmt.Printf("\n=== chaos soak summary\n%s\n", res.Summary())
	require.Positive(t, res.Report.Stats.Grants)
}
