package lease_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// exampleManager connects and migrates the lease schema "app".
func exampleManager(ctx context.Context) (*lease.Manager, *pgxpool.Pool) {
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := migrations.Migrate(ctx, pool, migrations.Options{Schema: "app"}, migrations.Lease); err != nil {
		log.Fatal(err)
	}
	m, err := lease.New(lease.Config{Pool: pool, Schema: "app", TTL: 15 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	return m, pool
}

// Acquire, work under the lease's context, release with a fresh context.
func ExampleManager_Acquire() {
	ctx := context.Background()
	m, pool := exampleManager(ctx)
	defer pool.Close()
	defer m.Close()

	key := lease.Key{AccountID: "acct-1", SessionID: "conversation-42"}
	l, err := m.Acquire(ctx, key)
	var held *lease.HeldError
	if errors.As(err, &held) {
		fmt.Printf("run %s (token %d) owns it for %s more\n", held.RunID, held.Token, held.Remaining)
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, _ = l.Release(rctx)
	}()

	work := l.Context() // cancelled on loss; carries the token
	token, _ := fence.FromContext(work)
	fmt.Println("token", token, "trusted for", l.Remaining().Round(time.Second))
	select {
	case <-work.Done():
		fmt.Println("stop: ", context.Cause(work)) // ErrLost, ErrTrustExpired, ...
	case <-time.After(10 * time.Millisecond): // the work
	}
}

// Run does acquire → fn → release, and reports a loss even if fn ignores it.
func ExampleManager_Run() {
	ctx := context.Background()
	m, pool := exampleManager(ctx)
	defer pool.Close()
	defer m.Close()

	err := m.Run(ctx, lease.Key{AccountID: "acct-1", SessionID: "conversation-43"},
		func(ctx context.Context, l *lease.Lease) error {
			// Pass ctx to every write; guards read the token from it.
			return nil
		})
	switch {
	case errors.Is(err, lease.ErrHeld):
		fmt.Println("another run owns the conversation")
	case errors.Is(err, lease.ErrLost), errors.Is(err, lease.ErrTrustExpired):
		fmt.Println("lost the lease mid-run; a newer run may have taken over:", err)
	case err != nil:
		log.Fatal(err)
	}
}

// Inspect is what clients call to reconcile their UI with the server.
func ExampleManager_Inspect() {
	ctx := context.Background()
	m, pool := exampleManager(ctx)
	defer pool.Close()
	defer m.Close()

	st, err := m.Inspect(ctx, lease.Key{AccountID: "acct-1", SessionID: "conversation-42"})
	if err != nil {
		log.Fatal(err)
	}
	switch st.Status {
	case lease.StatusHeld:
		fmt.Printf("running: run %s, token %d, %s left\n", st.RunID, st.Token, st.Remaining)
	case lease.StatusNotFound:
		fmt.Println("never run")
	default: // released or expired: anyone may start a run
		fmt.Println("idle:", st.Status)
	}
}

// AcquireWait blocks until the key is free, woken by the holder's release.
func ExampleManager_AcquireWait() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, pool := exampleManager(ctx)
	defer pool.Close()
	defer m.Close()

	l, err := m.AcquireWait(ctx, lease.Key{AccountID: "acct-1", SessionID: "conversation-44"})
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _, _ = l.Release(context.WithoutCancel(ctx)) }()
	fmt.Println("acquired with token", l.Token())
}

// A CLI that does not keep the *Lease renews and releases by run_id.
func ExampleManager_Release() {
	ctx := context.Background()
	m, pool := exampleManager(ctx)
	defer pool.Close()
	defer m.Close()

	key := lease.Key{AccountID: "acct-1", SessionID: "conversation-45"}
	st, err := m.Inspect(ctx, key)
	if err != nil || !st.Held() {
		return
	}
	res, err := m.Release(ctx, key, st.RunID) // retry-safe: AlreadyReleased on a repeat
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res)
}
