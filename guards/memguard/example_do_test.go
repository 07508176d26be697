package memguard_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/memguard"
)

// The ctx-first form: the claim travels in the context (a lease's context
// carries it; fence.WithClaim sets one for tokens from elsewhere). A context
// without a claim writes nothing; an ended context reports its cause; the
// same token from another run is refused as a reuse.
func ExampleGuard_Do() {
	g, err := memguard.New(memguard.Config{})
	if err != nil {
		panic(err)
	}
	write := func(context.Context) error { return nil }
	ctx := fence.WithClaim(context.Background(), fence.Claim{Token: 8, Run: "run-a"})
	fmt.Println("with a claim:", g.Do(ctx, "reports/q3", write))
	fmt.Println("no claim:", errors.Is(g.Do(context.Background(), "reports/q3", write), fence.ErrNoToken))

	lost := errors.New("lease lost")
	ended, cancel := context.WithCancelCause(ctx)
	cancel(lost)
	err = g.Do(ended, "reports/q3", write)
	fmt.Println("ended:", errors.Is(err, context.Canceled), errors.Is(err, lost), errors.Is(err, fence.ErrBusy))

	other := fence.WithClaim(context.Background(), fence.Claim{Token: 8, Run: "run-b"})
	_, reused := fence.IsReused(g.Do(other, "reports/q3", write))
	mark, err := g.Mark(ctx, "reports/q3")
	if err != nil {
		fmt.Println("mark:", err)
		return
	}
	fmt.Println("same token, other run:", reused, "| mark", mark.Token, mark.Run)
	// Output:
	// with a claim: <nil>
	// no claim: true
	// ended: true true false
	// same token, other run: true | mark 8 run-a
}
