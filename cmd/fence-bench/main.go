// Command fence-bench measures fencekit against the floor set by PostgreSQL
// and MinIO (issue 6): lease cycle vs raw SQL, renewal at scale, guard
// overhead, handover latency and contention. Each comparison alternates its
// two sides in rounds within one run and reports ratios. It prints a table
// and, as its last line, one JSON object; -chart writes an SVG chart.
//
// Usage:
//
//	eval "$(scripts/services.sh)"; go run ./cmd/fence-bench [-quick] [-chart out/bench.svg]
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/fencekit/fencekit/internal/bench"
)

type env struct {
	ctx    context.Context
	quick  bool
	dbURL  string
	rep    *bench.Report
	series []bench.Series
	errs   map[string]string
}

func main() {
	quick := flag.Bool("quick", os.Getenv("BENCH_QUICK") == "1", "short run (under 60 s); default from BENCH_QUICK=1")
	chart := flag.String("chart", "", "write the SVG chart to this path")
	flag.Parse()
	e := &env{ctx: context.Background(), quick: *quick, dbURL: os.Getenv("TEST_DATABASE_URL"), rep: &bench.Report{Info: map[string]any{}}, errs: map[string]string{}}
	if e.dbURL == "" {
		e.dbURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	start := time.Now()
	for _, s := range []struct {
		name string
		run  func(*env) error
		keys []string
	}{
		{"pg_guard", pgGuard, []string{"pg_guard_overhead_ratio"}},
		{"s3_guard", s3Guard, []string{"s3_guard_overhead_ratio"}},
		{"lease_cycle", leaseCycle, []string{"lease_cycle_ratio_vs_raw"}},
		{"handover", handover, []string{"handover_p50_ms", "handover_p99_ms"}},
		{"contention", contention, nil},
		{"renewal", renewal, []string{"renew_leases_per_statement", "renew_batch_speedup", "heap_bytes_per_lease"}},
	} {
		fmt.Fprintf(os.Stderr, "[bench] %s ...\n", s.name)
		t0 := time.Now()
		if err := safe(s.run, e); err != nil {
			e.errs[s.name] = err.Error()
			fmt.Fprintf(os.Stderr, "[bench] %s failed: %v\n", s.name, err)
			for _, k := range s.keys {
				if _, ok := e.rep.Get(k); !ok {
					e.rep.Add(bench.Metric{Key: k, Value: math.NaN(), Note: "failed: " + s.name})
				}
			}
		}
		fmt.Fprintf(os.Stderr, "[bench] %s done in %v\n", s.name, time.Since(t0).Round(time.Millisecond))
	}
	e.rep.Info["quick"] = e.quick
	e.rep.Info["elapsed_s"] = math.Round(time.Since(start).Seconds()*10) / 10
	if len(e.errs) > 0 {
		e.rep.Info["errors"] = e.errs
	}
	_ = e.rep.WriteTable(os.Stdout)
	if *chart != "" {
		if err := writeChart(*chart, e); err != nil {
			fmt.Fprintln(os.Stderr, "chart:", err)
		}
	}
	line, err := e.rep.JSONLine()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(line)
}

func writeChart(path string, e *env) error {
	f, err := os.Create(path) //nolint:gosec // the operator names the output file with -chart
	if err != nil {
		return err
	}
	if err := bench.WriteSVG(f, e.rep, e.series); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func safe(run func(*env) error, e *env) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return run(e)
}

// rounds is the number of alternating rounds and each side's duration.
func (e *env) rounds() (int, time.Duration) {
	if e.quick {
		return 4, 400 * time.Millisecond
	}
	return 10, time.Second
}
