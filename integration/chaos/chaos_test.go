package chaos

import (
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/integration/history"
)

var (
	flagSeed     = flag.Uint64("chaos.seed", 0, "replay one seed (TestChaos runs only this seed)")
	flagDuration = flag.Duration("chaos.duration", 0, "duration of each TestChaos run (default 10s)")
	flagFaults   = flag.String("chaos.faults", "default", "faults to inject: comma list, default, all, none, -name")
	flagLease    = flag.String("chaos.lease", "", "lease implementation: lease, reference (default: DefaultLease)")
	flagRestart  = flag.Bool("chaos.pgrestart", false, "also crash and restart PostgreSQL during TestChaos runs (on a private cluster per run)")
	flagProcs    = flag.Int("chaos.procs", 0, "child processes (default 2)")
)

// ciSeeds are the fixed seeds of the bounded CI pass.
var ciSeeds = []uint64{1, 2, 3}

func faultsFromFlags(t testing.TB) FaultSet {
	fs, err := ParseFaults(*flagFaults)
	require.NoError(t, err)
	if *flagRestart {
		fs[FaultPGRestart] = true
	}
	return fs
}

func runAndCheck(t *testing.T, cfg Config) *Result {
	t.Helper()
	res := Run(t, cfg)
	t.Log(res.Summary())
	for _, e := range res.ChildErrs {
		t.Errorf("child process: %s", e)
	}
	if !res.Report.OK() {
		t.Errorf("seed %d: %s\nreplay: go test -race ./integration/chaos -run 'TestChaos$' -chaos.seed=%d -chaos.duration=%s -chaos.faults=%s",
			cfg.Seed, res.Report, cfg.Seed, res.Config.Duration, res.Config.Faults)
	}
	return res
}

// TestChaos is the bounded pass CI runs: the fixed seeds plus one fresh
// seed (printed), each for -chaos.duration. With -chaos.seed it replays that
// seed alone.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos runs need PostgreSQL and MinIO")
	}
	seeds := append([]uint64(nil), ciSeeds...)
	fresh := uint64(time.Now().UnixNano())
	seeds = append(seeds, fresh)
	if *flagSeed != 0 {
		seeds = []uint64{*flagSeed}
	} else {
		t.Logf("fresh seed this run: %d (replay with -chaos.seed=%d)", fresh, fresh)
	}
	dur := *flagDuration
	if dur == 0 {
		dur = 10 * time.Second
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			res := runAndCheck(t, Config{Seed: seed, Duration: dur, Faults: faultsFromFlags(t), Lease: *flagLease, Procs: *flagProcs, Logf: t.Logf})
			s := res.Report.Stats
			// A run that never granted, wrote or faulted proved nothing.
			assert.Positive(t, s.Grants, "no lease was granted")
			assert.Positive(t, s.Writes[GuardPG][history.Accepted]+s.Writes[GuardS3][history.Accepted]+s.Writes[GuardHTTP][history.Accepted], "no write was accepted")
			assert.NotEmpty(t, s.FaultsByKind, "no fault was injected")
		})
	}
}

// TestChaosCatchesBrokenLease runs the harness over a lease that trusts
// itself past expiry, with pauses: the checker must report it. This proves
// the harness can fail.
func TestChaosCatchesBrokenLease(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL and MinIO")
	}
	res := Run(t, Config{Seed: 7, Duration: 6 * time.Second, Lease: "overtrust", Procs: -1, Goroutines: 4, Sessions: 1,
		Faults: NewFaultSet(FaultPause), Guards: []string{GuardPG}, Logf: t.Logf})
	t.Log(res.Summary())
	require.False(t, res.Report.OK(), "a lease trusting itself 2 TTLs past expiry went unnoticed")
	assert.Positive(t, res.Report.Counts[history.OverlappingOwnership]+res.Report.Counts[history.WorkAfterLoss], "%s", res.Report)
	first := res.Report.Violations[0].String()
	assert.True(t, strings.HasPrefix(first, "VIOLATION "), first)
	t.Logf("first violation, as a failing run prints it:\n%s", first)
}

// TestChaosPGRestart: a bounded run whose database is a private cluster
// that crashes (stop -m immediate) and restarts, among connection cuts, with
// the history checked as in every run.
func TestChaosPGRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos runs need PostgreSQL and MinIO")
	}
	res := runAndCheck(t, Config{Seed: 11, Duration: 12 * time.Second, Faults: NewFaultSet(FaultPGRestart, FaultPGCut, FaultPause),
		Lease: *flagLease, Procs: *flagProcs, Logf: t.Logf})
	s := res.Report.Stats
	assert.Positive(t, s.Grants, "no lease was granted")
	assert.Positive(t, s.FaultsByKind[string(FaultPGRestart)], "no restart was injected")
}

func TestParseFaults(t *testing.T) {
	fs, err := ParseFaults("default,-sigstop")
	require.NoError(t, err)
	assert.False(t, fs[FaultSIGSTOP])
	assert.True(t, fs[FaultPause])
	assert.False(t, fs[FaultPGRestart])
	fs, err = ParseFaults("none,pg-cut")
	require.NoError(t, err)
	assert.Equal(t, "pg-cut", fs.String())
	_, err = ParseFaults("bogus")
	assert.Error(t, err)
}
