package main

import (
	"bytes"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/cmd/fence-bench/internal/bench"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/redisguard"
)

// redisCase: a plain SET of 1 KiB vs redisguard PutClaim (one EVALSHA that
// checks and writes value and mark), on one connection, one key each,
// interleaved.
func redisCase(e *bench.Env) error {
	ctx := e.Ctx
	c := redis.NewClient(&redis.Options{Addr: env("TEST_REDIS_ADDR", "127.0.0.1:6379"), PoolSize: 1})
	defer func() { _ = c.Close() }()
	prefix := fmt.Sprintf("fence-bench:%d:", time.Now().UnixNano())
	g, err := redisguard.New(redisguard.Config{Client: c, MarkPrefix: prefix + "mark:"})
	if err != nil {
		return err
	}
	plainKey, guardKey := prefix+"plain", prefix+"guarded"
	defer func() { _ = c.Del(ctx, plainKey, guardKey, prefix+"mark:{"+guardKey+"}").Err() }()
	body := bytes.Repeat([]byte("x"), 1<<10)
	run := bench.RunIdentity()
	var tok fence.Token
	in, err := bench.Interleave([]bench.Op{
		{Name: "SET", Run: func(int) error { return c.Set(ctx, plainKey, body, 0).Err() }},
		{Name: "redisguard PutClaim", Run: func(int) error {
			tok++
			return g.PutClaim(ctx, guardKey, fence.Claim{Token: tok, Run: run}, body)
		}},
	}, rounds(e, 300*time.Microsecond), time.Time{})
	if err != nil {
		return err
	}
	e.Report.Add(bench.GuardRatio(in, "redis_guard_ratio", 1, 0, 1.10, fmt.Sprintf(
		"redisguard PutClaim (EVALSHA: mark check + SET + HSET) vs SET, 1 KiB, go-redis, one connection; %d rounds interleaved, median of %d blocks",
		in.Rounds(), bench.RatioBlocks)))
	e.Report.Add(bench.Metric{Key: "redis_set_us", Value: float64(in.PerOp(0)) / 1e3, Unit: "µs", Note: "plain SET of 1 KiB"})
	return nil
}
