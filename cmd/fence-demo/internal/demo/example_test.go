package demo_test

import (
	"os"
	"time"

	"github.com/fencekit/fencekit/cmd/fence-demo/internal/demo"
)

// The timeline prints one line per event: offset, actor, token, kind,
// outcome and details; JSONPrinter prints the same event as one JSON line.
func ExampleTextPrinter() {
	e := demo.Event{Seq: 27, At: 1259 * time.Millisecond, Actor: demo.ActorA, Kind: demo.KindWrite,
		Outcome: demo.Stale, Token: 41, Store: "pg", Presented: 41, Highest: 43,
		Detail: "pg guard refused: stale token 41, resource has accepted 43"}
	demo.TextPrinter{W: os.Stdout}.Print(e)
	demo.JSONPrinter{W: os.Stdout}.Print(e)
	// Output:
	//   +1.259s  desktop/A      token 41   write       stale         pg guard refused: stale token 41, resource has accepted 43
	// {"at_ms":1259,"seq":27,"actor":"desktop/A","kind":"write","outcome":"stale","token":41,"store":"pg","presented":41,"highest":43,"detail":"pg guard refused: stale token 41, resource has accepted 43"}
}
