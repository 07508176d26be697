package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/fencekit/fencekit/cmd/fence-bench/internal/bench"
)

func main() {
	quick := flag.Bool("quick", false, "short run")
	only := flag.String("only", "redis,mysql,nats", "comma-separated stores to measure")
	flag.Parse()
	e := bench.StoreEnv(context.Background(), *quick)
	cases := map[string]struct {
		run  func(*bench.Env) error
		keys []string
	}{
		"redis": {redisCase, bench.RedisGuardKeys},
		"mysql": {mysqlCase, bench.MySQLGuardKeys},
		"nats":  {natsCase, bench.NATSGuardKeys},
	}
	failed := false
	for _, name := range strings.Split(*only, ",") {
		c, ok := cases[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "storesbench: unknown store %q\n", name)
			os.Exit(2)
		}
		if err := c.run(e); err != nil {
			fmt.Fprintf(os.Stderr, "storesbench: %s: %v\n", name, err)
			e.NullMissing(c.keys, "failed: "+name)
			failed = true
		}
	}
	if err := bench.WriteMetricLines(os.Stdout, e.Report.Metrics); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if failed {
		os.Exit(1)
	}
}

// rounds is the number of interleaved rounds of a case whose operations
// take about perOp: enough for a few seconds of each side (2000 rounds at
// most, 100 in a quick run).
func rounds(e *bench.Env, perOp time.Duration) int {
	if e.Quick {
		return 100
	}
	return int(min(2000, max(300, 4*time.Second/perOp)))
}
