package redisguard_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/redisguard"
)

// exampleClient connects to TEST_REDIS_ADDR (default 127.0.0.1:6379).
func exampleClient() *redis.Client {
	addr := os.Getenv("TEST_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	return redis.NewClient(&redis.Options{Addr: addr})
}

// Run A holds token 7 and stalls; run B takes over with token 8. A's late
// write is refused, atomically with the value's write, in Redis itself.
// Each run's ctx carries its claim (a lease's context does; fence.WithClaim
// here), so the writes take no token argument.
func Example() {
	ctx := context.Background()
	client := exampleClient()
	defer func() { _ = client.Close() }()
	g, err := redisguard.New(ctx, redisguard.Config{Client: client, MarkPrefix: "example:mark:"})
	if err != nil {
		panic(err)
	}
	const resource = "example:{session-42}:state"
	defer client.Del(ctx, resource, "example:mark:{session-42}"+resource)

	runA := fence.WithClaim(ctx, fence.Claim{Token: 7, Run: "run-a"})
	runB := fence.WithClaim(ctx, fence.Claim{Token: 8, Run: "run-b"})
	if err := g.Put(runA, resource, []byte("draft from A")); err != nil {
		panic(err)
	}
	if err := g.Put(runB, resource, []byte("final from B")); err != nil {
		panic(err)
	}
	err = g.Put(runA, resource, []byte("late write from A"))
	if se, ok := fence.IsStale(err); ok {
		fmt.Printf("A refused: token %d, resource has accepted %d\n", se.Presented, se.Highest)
	}
	value, info, err := g.Get(ctx, resource)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s (token %d, run %s)\n", value, info.Token, info.Run)

	// A fenced delete keeps the mark: A is still refused.
	if err := g.Delete(runB, resource); err != nil {
		panic(err)
	}
	_, _, err = g.Get(ctx, resource)
	fmt.Println(errors.Is(err, fence.ErrNotFound), errors.Is(g.Put(runA, resource, nil), fence.ErrStale))
	// Output:
	// A refused: token 7, resource has accepted 8
	// final from B (token 8, run run-b)
	// true true
}
