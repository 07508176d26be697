package history_test

import (
	"fmt"
	"time"

	"github.com/fencekit/fencekit/integration/history"
)

// A history in which run A's write with token 5 was accepted after run B's
// write with token 6 had completed: the checker reports it with the events
// that prove it.
func ExampleCheck() {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	events := []history.Event{
		{Seq: 1, Mono: ms(1000), Kind: history.WriteInvoke, Exec: "B", Resource: "reports/q3", Guard: "pg", Token: 6, Op: 1, Value: "b1"},
		{Seq: 2, Mono: ms(1020), Kind: history.WriteComplete, Exec: "B", Resource: "reports/q3", Guard: "pg", Token: 6, Op: 1, Value: "b1", Outcome: history.Accepted},
		{Seq: 3, Mono: ms(1100), Kind: history.WriteInvoke, Exec: "A", Resource: "reports/q3", Guard: "pg", Token: 5, Op: 1, Value: "a7"},
		{Seq: 4, Mono: ms(1130), Kind: history.WriteComplete, Exec: "A", Resource: "reports/q3", Guard: "pg", Token: 5, Op: 1, Value: "a7", Outcome: history.Accepted},
		{Seq: 5, Mono: ms(2000), Kind: history.Final, Exec: "checker", Resource: "reports/q3", Token: 6, Value: "b1"},
	}
	rep := history.Check(events, history.Options{})
	fmt.Println(rep)
	// Output:
	// 1 violation(s): stale-accepted=1
	// VIOLATION stale-accepted on reports/q3: write by A with token 5 accepted after token 6 had been accepted (by B)
	//     #1 t=1.000s write-invoke exec=B res=reports/q3 guard=pg token=6 op=1 value="b1"
	//     #2 t=1.020s write-complete exec=B res=reports/q3 guard=pg token=6 op=1 outcome=accepted value="b1"
	//     #3 t=1.100s write-invoke exec=A res=reports/q3 guard=pg token=5 op=1 value="a7"
	//     #4 t=1.130s write-complete exec=A res=reports/q3 guard=pg token=5 op=1 outcome=accepted value="a7"
}
