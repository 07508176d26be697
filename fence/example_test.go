package fence_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/fence"
)

// A resource that has accepted token 8 refuses token 7 and admits 8 and 9.
func ExampleDecide() {
	for _, presented := range []fence.Token{7, 8, 9} {
		err := fence.Decide("reports/q3", presented, 8)
		if se, ok := fence.IsStale(err); ok {
			fmt.Printf("token %d refused: resource has accepted %d\n", se.Presented, se.Highest)
			continue
		}
		fmt.Printf("token %d accepted\n", presented)
	}
	// Output:
	// token 7 refused: resource has accepted 8
	// token 8 accepted
	// token 9 accepted
}

// Tokens travel through context.Context so deep callers can find them.
func ExampleWithToken() {
	tok, err := fence.Parse("42")
	if err != nil {
		panic(err)
	}
	ctx := fence.WithToken(context.Background(), tok)
	if t, ok := fence.FromContext(ctx); ok {
		fmt.Println("running under token", t)
	}
	_, err = fence.Parse("-1")
	fmt.Println(errors.Is(err, fence.ErrInvalidToken))
	// Output:
	// running under token 42
	// true
}
