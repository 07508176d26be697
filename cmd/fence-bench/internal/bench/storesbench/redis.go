package main

import (
	"bytes"
	"fmt"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/cmd/fence-bench/internal/bench"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/redisguard"
)

// redisCase: a plain SET of 1 KiB vs redisguard Put (one EVALSHA that
// checks and writes value and mark), on one connection, one key each,
// interleaved; a third side sends EVALSHA of a script that returns at once,
// with Put's keys and arguments: the floor of any check-and-write
// script, which is what Redis 7.0 offers for one. Two more sides are the
// same SET protected the way Go users protect a Redis write with a lock
// library, with each library's defaults: github.com/bsm/redislock (Obtain
// with no retry, SET, Release) and github.com/go-redsync/redsync/v4 on the
// one server (Lock with one try, SET, Unlock).
func redisCase(e *bench.Env) error {
	ctx := e.Ctx
	c := redis.NewClient(&redis.Options{Addr: bench.Getenv("TEST_REDIS_ADDR", "127.0.0.1:6379"), PoolSize: 1})
	defer func() { _ = c.Close() }()
	prefix := fmt.Sprintf("fence-bench:%d:", time.Now().UnixNano())
	g, err := redisguard.New(ctx, redisguard.Config{Client: c, MarkPrefix: prefix + "mark:"})
	if err != nil {
		return err
	}
	plainKey, guardKey := prefix+"plain", prefix+"guarded"
	defer func() {
		_ = c.Del(ctx, plainKey, guardKey, prefix+"mark:{"+guardKey+"}", prefix+"mark:w{"+guardKey+"}").Err()
	}()
	body := bytes.Repeat([]byte("x"), 1<<10)
	run := bench.RunIdentity()
	var tok fence.Token
	// The keys and arguments of Put's script (value, mark, write-id
	// record; token, run, write id, op, value, TTL, deadline, window), the
	// keys as redisguard names them (see its package documentation).
	floorKey := prefix + "floor"
	floorMark := prefix + "mark:{" + floorKey + "}"
	lockedKey, syncedKey := prefix+"redislock", prefix+"redsync"
	defer func() { _ = c.Del(ctx, floorKey, lockedKey, syncedKey).Err() }()
	locker := redislock.New(c)
	// One mutex reused for every write, as an application keeps one per
	// resource; each Lock draws a fresh random value.
	mutex := redsync.New(redsyncgoredis.NewPool(c)).NewMutex(prefix+"redsync:lock", redsync.WithTries(1))
	const (
		plainSet = iota
		guarded
		noop
		lockedSet
		syncedSet
	)
	in, err := bench.Interleave([]bench.Op{
		{Name: "SET", Run: func(int) error { return c.Set(ctx, plainKey, body, 0).Err() }},
		{Name: "redisguard Put", Run: func(int) error {
			tok++
			return g.Put(fence.WithClaim(ctx, fence.Claim{Token: tok, Run: run}), guardKey, body)
		}},
		{Name: "no-op script", Run: func(int) error {
			id := fmt.Sprintf("%032x", tok)
			deadline := time.Now().Add(redisguard.DefaultDuplicateWindow).UnixMilli()
			return noopScript.Run(ctx, c, []string{floorKey, floorMark, prefix + "mark:w{" + floorKey + "}"},
				tok.String(), run, id, "p", body, "0", deadline, redisguard.DefaultDuplicateWindow.Milliseconds()).Err()
		}},
		{Name: "redislock Obtain + SET + Release", Run: func(int) error {
			l, err := locker.Obtain(ctx, prefix+"redislock:lock", 8*time.Second, nil)
			if err != nil {
				return fmt.Errorf("obtain: %w", err)
			}
			if err := c.Set(ctx, lockedKey, body, 0).Err(); err != nil {
				_ = l.Release(ctx)
				return err
			}
			return l.Release(ctx)
		}},
		{Name: "redsync Lock + SET + Unlock", Run: func(int) error {
			if err := mutex.LockContext(ctx); err != nil {
				return fmt.Errorf("lock: %w", err)
			}
			if err := c.Set(ctx, syncedKey, body, 0).Err(); err != nil {
				_, _ = mutex.UnlockContext(ctx)
				return err
			}
			if ok, err := mutex.UnlockContext(ctx); err != nil || !ok {
				return fmt.Errorf("unlock: released %v: %w", ok, err)
			}
			return nil
		}},
	}, rounds(e, 300*time.Microsecond), time.Time{})
	if err != nil {
		return err
	}
	e.Report.Add(bench.GuardRatio(in, "redis_guard_ratio", guarded, plainSet, 1.25, fmt.Sprintf(
		"redisguard Put (EVALSHA: write-id record and mark check + SET + HSET + ZADD) vs SET, 1 KiB, go-redis, one connection; %d rounds of 5 sides interleaved, median of %d blocks",
		in.Rounds(), bench.RatioBlocks)))
	e.Report.Add(bench.GuardRatio(in, "redis_guard_vs_redislock_ratio", guarded, lockedSet, 1,
		"redisguard Put vs the same SET under github.com/bsm/redislock v0.9.4 (Obtain, no retry; SET; Release): below 1 the guard is faster"))
	e.Report.Add(bench.GuardRatio(in, "redis_guard_vs_redsync_ratio", guarded, syncedSet, 1,
		"redisguard Put vs the same SET under github.com/go-redsync/redsync/v4 v4.18.1, one server (Lock, one try; SET; Unlock): below 1 the guard is faster"))
	e.Report.Add(bench.GuardRatio(in, "redislock_set_ratio", lockedSet, plainSet, 0,
		"redislock Obtain + SET + Release vs SET (three round trips: the obtain and release scripts around the SET)"))
	e.Report.Add(bench.GuardRatio(in, "redsync_set_ratio", syncedSet, plainSet, 0,
		"redsync Lock + SET + Unlock vs SET (three round trips: SET NX, the SET, the unlock script)"))
	e.Report.Add(bench.GuardRatio(in, "redis_script_floor_ratio", noop, plainSet, 0,
		"EVALSHA of a script that only returns {'ok', token, run}, with Put's 3 keys and 8 arguments, vs SET: the floor of a check-and-write script"))
	e.Report.Add(bench.Metric{Key: "redis_set_us", Value: float64(in.PerOp(plainSet)) / 1e3, Unit: "µs", Note: "plain SET of 1 KiB"})
	return nil
}

// noopScript returns at once what redisguard's write script returns when
// it admits a write.
var noopScript = redis.NewScript(`return {'ok', ARGV[1], ARGV[2]}`)
