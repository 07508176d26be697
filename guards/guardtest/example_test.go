package guardtest_test

import (
	"context"
	"fmt"

	"github.com/fencekit/fencekit/guards/guardtest"
	"github.com/fencekit/fencekit/guards/memguard"
)

// The checks are plain functions, so they can be run outside a test too.
// In a test, call guardtest.Run(t, guardtest.Config{New: ...}) instead.
// memguard sends nothing over a network, so it has no OutcomeWriter.
func ExampleChecks() {
	cfg, err := guardtest.Config{Writers: 4, Rounds: 10}.WithDefaults()
	if err != nil {
		panic(err)
	}
	for _, c := range guardtest.Checks() {
		g, _ := memguard.New(memguard.Config{})
		strict, _ := memguard.New(memguard.Config{Strict: true})
		s := guardtest.FromGuardStrict(g, strict, guardtest.NewMapStore())
		fmt.Printf("%-30s %v\n", c.Name, c.Func(context.Background(), s, cfg))
	}
	// Output:
	// FirstWriteAccepted             <nil>
	// HigherAccepted                 <nil>
	// EqualAccepted                  <nil>
	// StaleRejected                  <nil>
	// InvalidTokensRejected          <nil>
	// InvalidResourcesRejected       <nil>
	// FailedWriteKeepsMark           <nil>
	// ConcurrentHistory              <nil>
	// EndedContextRefused            <nil>
	// EndedContextRefusedContextForm <nil>
	// NoTokenRefused                 <nil>
	// ContextFormMatchesWrite        <nil>
	// TokenReuseRefused              <nil>
	// OutcomeUnknownReported         guardtest: subject does not implement guardtest.OutcomeWriter
	// DelayedDuplicateNotApplied     guardtest: subject does not implement guardtest.DuplicateWriter
	// LinearizableUnderFaults        <nil>
	// StrictScopeRefused             <nil>
	// FenceCallbackCarriesClaim      <nil>
	// FenceOnMissingResource         <nil>
}
