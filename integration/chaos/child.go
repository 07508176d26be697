package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/fencekit/fencekit/integration/history"
)

// childEnv is the environment variable through which a child process
// receives its procConfig (JSON).
const childEnv = "FENCEKIT_CHAOS_CHILD"

// IsChild reports whether this process was started by the runner as a child
// execution process. A test binary's TestMain calls it first and, if true,
// exits with ChildMain's code instead of running tests.
func IsChild() bool { return os.Getenv(childEnv) != "" }

// ChildMain runs the executions of a child process: it reads its
// configuration from the environment, streams every event as a JSON line to
// stdout, and returns when its duration is over, when stdin closes (the
// parent is gone) or on SIGTERM. It returns the process exit code.
func ChildMain() int {
	var pc procConfig
	if err := json.Unmarshal([]byte(os.Getenv(childEnv)), &pc); err != nil {
		fmt.Fprintln(os.Stderr, "chaos child: bad config:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, pc.Duration)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin) // EOF: the parent went away
		cancel()
	}()
	rec := history.NewStreamRecorder(os.Stdout)
	pr, err := newProcRun(ctx, pc, rec)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos child:", err)
		return 2
	}
	defer pr.close()
	pr.run(ctx)
	return 0
}
