package memguard_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/memguard"
)

// A tool writes an object (standing in for S3 through s3guard) and then the
// row that references it (standing in for PostgreSQL through pgguard, the
// commit point that readers follow). Both stores are fenced on the same
// resource name. Run B (token 8) has taken over and has so far written only
// the row; run A (token 7) wakes up late: its object write is still
// admitted, its row write is refused. A stops without undoing anything: B's
// later writes carry a higher token and replace A's object. Two memguards
// play the two stores; the example shows the order and the decisions, not
// S3's or PostgreSQL's own atomicity.
func Example_partialOutcome() {
	objects, err := memguard.New(memguard.Config{}) // the S3 stand-in
	if err != nil {
		panic(err)
	}
	rows, err := memguard.New(memguard.Config{}) // the PostgreSQL stand-in
	if err != nil {
		panic(err)
	}
	resource := fence.JoinResource("acme", "conv-1", "report")
	object, row := "", "" // the stores' contents

	// tool writes the object first and the row last: the row is the commit
	// point, so a refused row leaves at most an object that no row names.
	tool := func(ctx context.Context, body string) error {
		if body != "" {
			if err := objects.Do(ctx, resource, func(context.Context) error { object = body; return nil }); err != nil {
				return fmt.Errorf("object refused, nothing written: %w", err)
			}
		}
		return rows.Do(ctx, resource, func(context.Context) error { row = "report: " + body; return nil })
	}
	runA := fence.WithClaim(context.Background(), fence.Claim{Token: 7, Run: "run-a"})
	runB := fence.WithClaim(context.Background(), fence.Claim{Token: 8, Run: "run-b"})

	fmt.Println("B row only:", tool(runB, ""))
	err = tool(runA, "A's draft")
	if se, ok := fence.IsStale(err); ok {
		// Stop: a newer run owns the resource. Do not retry, do not delete
		// the object (a delete is not fenced); the newer run replaces it.
		fmt.Printf("A refused at the commit point: token %d < %d\n", se.Presented, se.Highest)
	}
	fmt.Printf("meanwhile: row %q, object %q\n", row, object)
	fmt.Println("B full write:", tool(runB, "B's report"))
	fmt.Printf("finally: row %q, object %q\n", row, object)
	fmt.Println("A again:", errors.Is(tool(runA, "A's draft"), fence.ErrStale))
	// Output:
	// B row only: <nil>
	// A refused at the commit point: token 7 < 8
	// meanwhile: row "report: ", object "A's draft"
	// B full write: <nil>
	// finally: row "report: B's report", object "B's report"
	// A again: true
}
