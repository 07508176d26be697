package guardobs_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/guardobs"
)

// A guard for another store records its decisions like fencekit's own:
// here a reuse refusal is logged with the shared message and fields.
func Example() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	rec, err := guardobs.New(guardobs.Config{Kind: "etcd", Name: "etcdguard", Logger: logger})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	// The guard's write path decided with fence.DecideClaim:
	err = fence.DecideClaim("jobs/7", fence.Claim{Token: 9, Run: "run-b"}, 9, "run-a")
	rec.Decision(ctx, err)
	fmt.Println(guardobs.RetriesName("redis"))
	// Output:
	// level=ERROR msg="etcdguard: token reused by a different run; write refused" resource=jobs/7 token=9 run=run-b mark_run=run-a
	// fencekit.guard.redis.retries
}
