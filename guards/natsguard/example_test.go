package natsguard_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/natsguard"
)

// Run A holds token 7 and stalls; run B takes over with token 8. A's late
// write is refused: the record it would replace carries B's token, and
// the write is a compare-and-set on the record's revision.
func Example() {
	ctx := context.Background()
	url := os.Getenv("TEST_NATS_URL")
	if url == "" {
		url = nats.DefaultURL
	}
	nc, err := nats.Connect(url)
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		panic(err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	bucket := "example_" + hex.EncodeToString(b[:])
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, History: 4}); err != nil {
		panic(err)
	}
	defer func() { _ = js.DeleteKeyValue(ctx, bucket) }()

	g, err := natsguard.New(ctx, natsguard.Config{Client: js, Bucket: bucket})
	if err != nil {
		panic(err)
	}
	runA := fence.WithClaim(ctx, fence.Claim{Token: 7, Run: "run-a"})
	runB := fence.WithClaim(ctx, fence.Claim{Token: 8, Run: "run-b"})
	if err := g.Put(runA, "sessions/42", []byte("draft from A")); err != nil {
		panic(err)
	}
	if err := g.Put(runB, "sessions/42", []byte("final from B")); err != nil {
		panic(err)
	}
	err = g.Put(runA, "sessions/42", []byte("late write from A"))
	if se, ok := fence.IsStale(err); ok {
		fmt.Printf("A refused: token %d, resource has accepted %d\n", se.Presented, se.Highest)
	}
	value, info, err := g.Get(ctx, "sessions/42")
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s (token %d, run %s, revision %d)\n", value, info.Token, info.Run, info.Revision)
	fmt.Println(natsguard.Key("sessions/42"), natsguard.Key("a.b c"))
	// Output:
	// A refused: token 7, resource has accepted 8
	// final from B (token 8, run run-b, revision 2)
	// sessions/42 a=2Eb=20c
}
