package leaseops_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/lease/leaseops"
)

// After a failover or restore (grants are refused with
// lease.ErrFailoverUnchecked meanwhile): check the sequence against the
// highest token the guards accepted and, when it is behind, advance it with
// CheckFloor on the same source; grants resume at once.
func ExampleTokenFloor() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	marks, err := pgguard.NewMarks(pgguard.MarksConfig{DB: pool, Schema: "app"})
	if err != nil {
		panic(err)
	}
	const operatorFloor = 0 // e.g. the highest token your monitoring recorded
	source := lease.MaxFloor(marks.Highest, lease.StaticFloor(operatorFloor))
	floor, _ := leaseops.NewTokenFloor(leaseops.TokenFloorConfig{Pool: pool, Schema: "app", Source: source})
	if _, err := floor.Check(ctx); errors.Is(err, lease.ErrTokenFloor) {
		if _, err := leaseops.CheckFloor(ctx, pool, "app", lease.FloorConfig{Source: source}); err != nil {
			panic(err)
		}
	}
}

// The floor check as an operator runs it (an operator CLI, a deploy hook),
// with any role granted EXECUTE on fencekit_check_floor and the same
// lease.FloorConfig a Manager checks by itself with (lease.Config.Floor):
// it advances the sequence past the floor if needed and records the node;
// grants refused with lease.ErrFailoverUnchecked there resume.
func ExampleCheckFloor() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db-primary/app")
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	marksPool, err := pgxpool.New(ctx, "postgres://app@marks-db/app") // survives the lease database
	if err != nil {
		panic(err)
	}
	defer marksPool.Close()
	marks, err := pgguard.NewMarks(pgguard.MarksConfig{DB: marksPool, Schema: "app"})
	if err != nil {
		panic(err)
	}
	const operatorFloor = 0 // e.g. the highest token your monitoring recorded
	rep, err := leaseops.CheckFloor(ctx, pool, "app", lease.FloorConfig{
		Source: lease.MaxFloor(marks.Highest, lease.StaticFloor(operatorFloor)),
		Gap:    1_000_000, // asynchronous replication: jump past lost grants
	})
	if err != nil {
		panic(err)
	}
	fmt.Printf("next token %d above floor %d on %s (was %s; advanced from %d)\n",
		rep.Next, rep.Floor(), rep.Node, rep.CheckedBefore, rep.AdvancedFrom)
}

// Housekeeping: delete rows released or expired more than a day ago, in the
// background, until shutdown.
func ExampleJanitor() {
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	j, _ := leaseops.NewJanitor(leaseops.JanitorConfig{Pool: pool, Schema: "app",
		Retention: 24 * time.Hour, StatementBound: 5 * time.Second})
	defer j.Close() // NewJanitor starts it: a sweep every Interval (10 min)
}
