package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
)

// Getenv is os.Getenv(name), or def when it is empty: the nested bench
// modules' defaults for the services' addresses.
func Getenv(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// DBCase is the main of a nested bench module that measures one case
// against the lease database (mcpbench, effectsbench): flags -quick, -db
// (default TEST_DATABASE_URL) and -rounds (default 1500; 200 with
// -quick), described by roundsHelp, and -cpuprofile (a file for the
// process's CPU profile over run: client and server sides, not the
// database's). It runs run, reports a failure on
// stderr prefixed with name, writes a null for every key of keys that
// has no value (note "failed: <caseName>"), writes the metrics as JSON
// lines to stdout and exits 1 if run or the write failed.
func DBCase(name, caseName string, keys []string, roundsHelp string, run func(e *Env, db string, rounds int, log io.Writer) error) {
	quick := flag.Bool("quick", false, "short run")
	db := flag.String("db", Getenv("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL URL")
	rounds := flag.Int("rounds", 0, roundsHelp+" (default 1500; 200 with -quick)")
	cpuProfile := flag.String("cpuprofile", "", "write the process's CPU profile over the run to this file")
	flag.Parse()
	if *rounds <= 0 {
		*rounds = 1500
		if *quick {
			*rounds = 200
		}
	}
	e := StoreEnv(context.Background(), *quick)
	failed := false
	stopProfile, err := startCPUProfile(*cpuProfile)
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
	err = run(e, *db, *rounds, os.Stderr)
	stopProfile()
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		failed = true
	}
	e.NullMissing(keys, "failed: "+caseName)
	if err := WriteMetricLines(os.Stdout, e.Report.Metrics); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if failed {
		os.Exit(1)
	}
}

// startCPUProfile starts the process's CPU profile into path (nothing when
// path is empty); the returned func stops it and closes the file.
func startCPUProfile(path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path) //nolint:gosec // G304: the path is the operator's own -cpuprofile flag
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}
