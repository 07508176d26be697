// Command fencekit is the operator's tool for fencekit's PostgreSQL schema:
// migrations, the token floor after a failover or restore, leases
// (list, inspect, revoke, watch) and housekeeping. Install it with
//
//	go install github.com/fencekit/fencekit/cmd/fencekit@latest
//
// and run `fencekit --help`; docs/cli.md is the manual. The program lives in
// cmd/fencekit/internal/cli.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/fencekit/fencekit/cmd/fencekit/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], cli.Env{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv})
	stop()
	os.Exit(code)
}
