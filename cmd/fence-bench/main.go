// Command fence-bench measures fencekit against the floor set by PostgreSQL
// and MinIO: the lease cycle against the design note's own statements and
// cirello.io/pglock, renewal at scale, guard overhead (against the plain
// writes and against redislock, redsync and pglock), growth with workers
// and held leases, handover latency and contention (the measurements are
// in internal/bench). Each comparison
// alternates its sides in rounds within one run and reports ratios with
// their spread over the rounds. It prints a table and, as its last line,
// one JSON object; -chart writes an SVG chart.
//
// Usage:
//
//	eval "$(scripts/services.sh)"; go run ./cmd/fence-bench [-quick] [-only lease_cycle,renewal,heartbeat] [-heartbeat.leases N] [-growth.million] [-chart out/bench.svg]
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/fencekit/fencekit/cmd/fence-bench/internal/bench"
)

func main() {
	quick := flag.Bool("quick", os.Getenv("BENCH_QUICK") == "1", "short run (under 60 s); default from BENCH_QUICK=1")
	chart := flag.String("chart", "", "write the SVG chart to this path")
	only := flag.String("only", "", "comma-separated cases to run (default all): "+caseNames())
	peer := flag.String("peer", "cmd/fence-bench/internal/bench/pglockpeer", "directory of the pglock peer module (empty: no pglock side)")
	hbLeases := flag.Int("heartbeat.leases", 0, "leases the heartbeat case holds in one Manager (default 1,000,000; 20,000 with -quick)")
	million := flag.Bool("growth.million", false, "growth case: also grow the heartbeat Manager to 1,000,000 leases (minutes of grants)")
	stores := flag.String("stores", "cmd/fence-bench/internal/bench/storesbench", "directory of the store bench module (Redis, MySQL, NATS guard cases)")
	mcpDir := flag.String("mcp", "cmd/fence-bench/internal/bench/mcpbench", "directory of the MCP bench module (mcp_call: a fenced MCP tool call vs the same tool unfenced)")
	effectsDir := flag.String("effects", "cmd/fence-bench/internal/bench/effectsbench", "directory of the effects bench module (effects: Record vs pgguard InTx, delivery delay, relay vs river)")
	flag.Parse()
	e := &bench.Env{
		Ctx:             context.Background(),
		Quick:           *quick,
		DBURL:           os.Getenv("TEST_DATABASE_URL"),
		PeerDir:         *peer,
		StoresDir:       *stores,
		MCPDir:          *mcpDir,
		EffectsDir:      *effectsDir,
		HeartbeatLeases: *hbLeases,
		GrowthMillion:   *million,
		Report:          &bench.Report{Info: map[string]any{}},
		Log:             os.Stderr,
	}
	if e.DBURL == "" {
		e.DBURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	cases, err := selectCases(*only)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	start := time.Now()
	e.Report.Info["loadavg_start"] = loadavg()
	errs := e.Run(cases)
	e.Report.Info["loadavg_end"] = loadavg()
	e.Report.Info["quick"] = e.Quick
	e.Report.Info["elapsed_s"] = math.Round(time.Since(start).Seconds()*10) / 10
	if len(errs) > 0 {
		e.Report.Info["errors"] = errs
	}
	_ = e.Report.WriteTable(os.Stdout)
	if *chart != "" {
		if err := writeChart(*chart, e); err != nil {
			fmt.Fprintln(os.Stderr, "chart:", err)
		}
	}
	line, err := e.Report.JSONLine()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(line)
}

// loadavg is the machine's 1-minute load average (/proc/loadavg), or "" if
// unreadable: context for absolute figures on a shared machine.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

func caseNames() string {
	var names []string
	for _, c := range bench.Cases() {
		names = append(names, c.Name)
	}
	return strings.Join(names, ",")
}

func selectCases(only string) ([]bench.Case, error) {
	all := bench.Cases()
	if only == "" {
		return all, nil
	}
	var out []bench.Case
	for _, name := range strings.Split(only, ",") {
		found := false
		for _, c := range all {
			if c.Name == name {
				out, found = append(out, c), true
			}
		}
		if !found {
			return nil, fmt.Errorf("-only: unknown case %q (cases: %s)", name, caseNames())
		}
	}
	return out, nil
}

func writeChart(path string, e *bench.Env) error {
	f, err := os.Create(path) //nolint:gosec // the operator names the output file with -chart
	if err != nil {
		return err
	}
	if err := bench.WriteSVG(f, e.Report, e.Series, e.Growth); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
