package lease_test

import (
	"context"
	"fmt"
	"log"

	"github.com/google/uuid"

	"github.com/fencekit/fencekit/lease"
)

// An operator ends a stuck conversation's grant: the holder's renewals are
// refused from now on, and the next grant takes a larger token.
func ExampleManager_Revoke() {
	ctx := context.Background()
	m, pool := exampleManager(ctx)
	defer pool.Close()
	defer m.Close()

	key := conversation()
	stuck, err := m.Acquire(ctx, key)
	if err != nil {
		log.Fatal(err)
	}
	r, err := m.RevokeCurrent(ctx, key) // whichever run holds it
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("revoked:", r.Revoked, "state:", r.Ownership.State, "same run:", r.RunID == stuck.RunID())
	<-stuck.Done() // a Lease of the revoking Manager ends at once
	fmt.Println("holder's context:", context.Cause(stuck.Context()))

	next, err := m.Acquire(ctx, key)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _, _ = next.Release(context.WithoutCancel(ctx)) }()
	fmt.Println("next token larger:", next.Token() > stuck.Token())

	again, err := m.RevokeCurrent(ctx, lease.Key{AccountID: "acct-1", SessionID: "nobody-" + uuid.NewString()})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("revoked:", again.Revoked, "state:", again.Ownership.State)
	// Output:
	// revoked: true state: expired same run: true
	// holder's context: lease: lost (renewal rejected)
	// next token larger: true
	// revoked: false state: not-found
}
