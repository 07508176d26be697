package memguard_test

import (
	"context"
	"fmt"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/memguard"
)

// Run A (token 7) stalls; run B takes over with token 8 and writes. When A
// wakes up, its write is refused and the report keeps B's content.
func Example() {
	g, err := memguard.New(memguard.Config{})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	report := ""
	write := func(run string, token fence.Token) {
		err := g.Fence(ctx, "reports/q3", token, func(context.Context) error {
			report = "written by " + run
			return nil
		})
		if se, ok := fence.IsStale(err); ok {
			fmt.Printf("%s refused: token %d < %d\n", run, se.Presented, se.Highest)
			return
		}
		fmt.Printf("%s accepted with token %d\n", run, token)
	}
	write("B", 8)
	write("A", 7)
	mark, err := g.Mark(ctx, "reports/q3")
	if err != nil {
		fmt.Println("mark:", err)
		return
	}
	fmt.Println(report, "| mark", mark.Token)
	// Output:
	// B accepted with token 8
	// A refused: token 7 < 8
	// written by B | mark 8
}
