package main

import (
	"bytes"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencekit/fencekit/cmd/fence-bench/internal/bench"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/natsguard"
)

// natsCase: a plain KV Put of 1 KiB vs natsguard Put (one publish
// conditional on the revision this guard's last write left), one
// connection, one key each, interleaved, on a file-backed bucket.
func natsCase(e *bench.Env) error {
	ctx := e.Ctx
	nc, err := nats.Connect(bench.Getenv("TEST_NATS_URL", nats.DefaultURL))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	bucket := fmt.Sprintf("fence_bench_%d", time.Now().UnixNano())
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, History: 1})
	if err != nil {
		return err
	}
	defer func() { _ = js.DeleteKeyValue(ctx, bucket) }()
	g, err := natsguard.New(ctx, natsguard.Config{Client: js, Bucket: bucket})
	if err != nil {
		return err
	}
	body := bytes.Repeat([]byte("x"), 1<<10)
	run := bench.RunIdentity()
	var tok fence.Token
	in, err := bench.Interleave([]bench.Op{
		{Name: "KV Put", Run: func(int) error { _, err := kv.Put(ctx, "plain", body); return err }},
		{Name: "natsguard Put", Run: func(int) error {
			tok++
			return g.Put(fence.WithClaim(ctx, fence.Claim{Token: tok, Run: run}), "guarded", body)
		}},
	}, rounds(e, 300*time.Microsecond), time.Time{})
	if err != nil {
		return err
	}
	e.Report.Add(bench.GuardRatio(in, "nats_guard_ratio", 1, 0, 1.10, fmt.Sprintf(
		"natsguard Put (publish with expected revision and msg id) vs KV Put, 1 KiB, file storage, one connection; %d rounds interleaved, median of %d blocks",
		in.Rounds(), bench.RatioBlocks)))
	e.Report.Add(bench.Metric{Key: "nats_put_us", Value: float64(in.PerOp(0)) / 1e3, Unit: "µs", Note: "plain KV Put of 1 KiB"})
	return nil
}
