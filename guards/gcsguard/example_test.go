package gcsguard_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/gcsguard"
)

// Run A holds token 7 and writes a report; run B takes over with token 8 and
// writes; A's late write is refused. The object stays a plain object that
// any GCS client can read. (The in-process emulator stands in for GCS: pass
// your own *storage.Client.)
func Example() {
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{NoListener: true})
	if err != nil {
		panic(err)
	}
	defer srv.Stop()
	srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: "reports"})
	client := srv.Client()
	defer client.Close()

	store, err := gcsguard.New(gcsguard.Config{Client: client, Bucket: "reports"})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	key := fence.JoinResource("acct-1", "session-9", "report.txt")

	// A lease's context carries its claim; fence.WithClaim stands in here.
	runA := fence.WithClaim(ctx, fence.Claim{Token: 7, Run: "run-a"})
	runB := fence.WithClaim(ctx, fence.Claim{Token: 8, Run: "run-b"})

	if _, err := store.PutBytes(runA, key, []byte("draft by A"), gcsguard.PutOptions{ContentType: "text/plain"}); err != nil {
		panic(err)
	}
	if _, err := store.PutBytes(runB, key, []byte("final by B"), gcsguard.PutOptions{ContentType: "text/plain"}); err != nil {
		panic(err)
	}
	_, err = store.PutBytes(runA, key, []byte("late write by A"), gcsguard.PutOptions{})
	fmt.Println("A's late write stale:", errors.Is(err, fence.ErrStale))

	b, info, err := store.GetBytes(ctx, key)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s (token %d, run %s)\n", b, info.Token, info.Run)

	// The same token from another run is a reuse, not a retry.
	reused := fence.WithClaim(ctx, fence.Claim{Token: 8, Run: "run-c"})
	_, err = store.PutBytes(reused, key, []byte("?"), gcsguard.PutOptions{})
	fmt.Println("token 8 from run-c reused:", errors.Is(err, fence.ErrTokenReused))

	// Without a claim in ctx nothing is written.
	_, err = store.PutBytes(ctx, key, []byte("?"), gcsguard.PutOptions{})
	fmt.Println("no token:", errors.Is(err, fence.ErrNoToken))
	// Output:
	// A's late write stale: true
	// final by B (token 8, run run-b)
	// token 8 from run-c reused: true
	// no token: true
}

// Fence runs a callback under the guard; Stage provides the content that
// is committed once the callback returns nil.
func ExampleGuard_Fence() {
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{NoListener: true})
	if err != nil {
		panic(err)
	}
	defer srv.Stop()
	srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: "b"})
	client := srv.Client()
	defer client.Close()
	store, err := gcsguard.New(gcsguard.Config{Client: client, Bucket: "b"})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	err = store.Fence(ctx, "notes.md", 3, func(ctx context.Context) error {
		return gcsguard.StageBytes(ctx, []byte("# notes"), gcsguard.PutOptions{ContentType: "text/markdown"})
	})
	fmt.Println("committed:", err == nil)
	err = store.Fence(ctx, "notes.md", 2, func(ctx context.Context) error {
		panic("not called for a stale token")
	})
	se, _ := fence.IsStale(err)
	fmt.Printf("token %d refused, mark %d\n", se.Presented, se.Highest)
	// Output:
	// committed: true
	// token 2 refused, mark 3
}
