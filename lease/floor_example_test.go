package lease_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/lease"
)

// A Manager that ends the refusal of grants after a failover, switchover or
// restore by itself: when a grant is refused on a node whose token floor was
// not checked, it checks the floor against the PostgreSQL guard's marks (on
// another cluster, which survives the lease database's failover) and an
// operator floor, advances the sequence if needed, and grants in the same
// call. The role needs EXECUTE on fencekit_check_floor (docs/operations.md).
func ExampleFloorConfig() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db-primary,db-standby/app?target_session_attrs=read-write")
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	marksPool, err := pgxpool.New(ctx, "postgres://app@marks-db/app")
	if err != nil {
		panic(err)
	}
	defer marksPool.Close()
	marks, err := pgguard.NewMarks(pgguard.MarksConfig{DB: marksPool, Schema: "app"}) // pgguard marks on another cluster
	if err != nil {
		panic(err)
	}
	var operatorFloor fence.Token // e.g. the highest token your monitoring recorded
	m, err := lease.New(lease.Config{Pool: pool, Schema: "app",
		Floor: lease.FloorConfig{
			Source: lease.MaxFloor(marks.Highest, lease.StaticFloor(operatorFloor)), // the larger of both
			Gap:    1_000_000,                                                       // asynchronous replication: jump past lost grants
		}})
	if err != nil {
		panic(err)
	}
	defer func() { _ = m.Close() }()
	fmt.Println(m.TTL())
}
