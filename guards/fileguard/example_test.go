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

// A strict guard admits a claim only for resources inside its scope (a
// lease's claim is scoped to its key: lease.Key.Scope, the prefix of every
// lease.Key.Resource). Key conv-2's claim cannot write conv-1's file,
// whatever its token.
func ExampleConfig_strict() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "fileguard-example-")
	if err != nil {
		panic(err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	g, err := fileguard.New(fileguard.Config{Dir: dir, Strict: true})
	if err != nil {
		panic(err)
	}
	conv1 := fence.WithClaim(ctx, fence.Claim{Token: 3, Scope: fence.JoinResource("acme", "conv-1")})
	conv2 := fence.WithClaim(ctx, fence.Claim{Token: 9, Scope: fence.JoinResource("acme", "conv-2")})
	notes := fence.JoinResource("acme", "conv-1", "notes")
	if err := g.Put(conv1, notes, []byte("from conv-1")); err != nil {
		panic(err)
	}
	err = g.Put(conv2, notes, []byte("from conv-2"))
	if se, ok := fence.IsOutOfScope(err); ok {
		fmt.Printf("refused: %s is outside %s\n", se.Resource, se.Scope)
	}
	b, info, err := g.Get(ctx, notes)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s (token %d)\n", b, info.Token)
	// Output:
	// refused: acme/conv-1/notes is outside acme/conv-2
	// from conv-1 (token 3)
}
