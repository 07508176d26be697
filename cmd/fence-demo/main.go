// Command fence-demo shows fencekit doing its job against real PostgreSQL and
// MinIO: one conversation, two devices, a stalled run fenced off. Run it with
// `make demo`; `fence-demo --help` lists the subcommands and exit codes. The
// program lives in internal/demo.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/fencekit/fencekit/cmd/fence-demo/internal/demo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := demo.Main(ctx, os.Args[1:], demo.Env{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv})
	stop()
	os.Exit(code)
}
