//go:build unix

package fileguard_test

import (
	"context"
	"fmt"
	"os"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/fileguard"
)

// Run A holds token 7 and stalls; run B takes over with token 8. A's late
// write is refused under the file's lock, before anything is written.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "fileguard-example-")
	if err != nil {
		panic(err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	g, err := fileguard.New(fileguard.Config{Dir: dir})
	if err != nil {
		panic(err)
	}
	runA := fence.WithClaim(ctx, fence.Claim{Token: 7, Run: "run-a"})
	runB := fence.WithClaim(ctx, fence.Claim{Token: 8, Run: "run-b"})
	if err := g.Put(runA, "reports/q3.txt", []byte("draft from A")); err != nil {
		panic(err)
	}
	if err := g.Put(runB, "reports/q3.txt", []byte("final from B")); err != nil {
		panic(err)
	}
	err = g.Put(runA, "reports/q3.txt", []byte("late write from A"))
	if se, ok := fence.IsStale(err); ok {
		fmt.Printf("A refused: token %d, resource has accepted %d\n", se.Presented, se.Highest)
	}
	b, info, err := g.Get(ctx, "reports/q3.txt")
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s (token %d, run %s)\n", b, info.Token, info.Run)
	// Output:
	// A refused: token 7, resource has accepted 8
	// final from B (token 8, run run-b)
}
