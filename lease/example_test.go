package lease_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// exampleManager connects and migrates the lease schema "app".
func exampleManager(ctx context.Context) (*lease.Manager, *pgxpool.Pool) {
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/test"
	}
	pool, err := pgxpool.New(ctx, url)
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

// conversation is a key no earlier run of the example used.
func conversation() lease.Key {
	return lease.Key{AccountID: "acct-1", SessionID: "conversation-" + uuid.NewString()}
}

// Acquire, work under the lease's context, release with a fresh context.
func ExampleManager_Acquire() {
	ctx := context.Background()
	m, pool := exampleManager(ctx)
	defer pool.Close()
	defer m.Close()

	key := conversation()
	l, err := m.Acquire(ctx, key)
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, _ = l.Release(rctx)
	}()

	work := l.Context() // keeps ctx's values, carries the claim, cancelled on loss
	claim, _ := fence.ClaimFromContext(work)
	fmt.Println("claim matches the lease:", claim.Token == l.Token() && claim.Run == l.RunID().String())

	_, err = m.Acquire(ctx, key) // a second caller is refused and told who holds it
	var held *lease.HeldError
	if errors.As(err, &held) {
		fmt.Println("held by the first run:", held.RunID == l.RunID())
	}
	// Output:
	// claim matches the lease: true
	// held by the first run: true
}

// Run does acquire → fn → release, and reports a loss even if fn ignores it.
func ExampleManager_Run() {
	ctx := context.Background()
	m, pool := exampleManager(ctx)
	defer pool.Close()
	defer m.Close()

	err := m.Run(ctx, conversation(), func(ctx context.Context, l *lease.Lease) error {
		// ctx is a child of the caller's ctx carrying the claim: pass it to
		// every guarded write.
		token, _ := fence.FromContext(ctx)
		fmt.Println("working under the lease's token:", token == l.Token())
		return nil
	})
	switch {
	case errors.Is(err, lease.ErrHeld):
		fmt.Println("another run owns the conversation")
	case errors.Is(err, lease.ErrLost), errors.Is(err, lease.ErrTrustExpired):
		fmt.Println("lost the lease mid-run; a newer run may have taken over:", err)
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println("done and released")
	}
	// Output:
	// working under the lease's token: true
	// done and released
}

// Inspect is what clients call to reconcile their UI with the server.
func ExampleManager_Inspect() {
	ctx := context.Background()
	m, pool := exampleManager(ctx)
	defer pool.Close()
	defer m.Close()

	key := conversation()
	show := func() {
		own, err := m.Inspect(ctx, key)
		if err != nil {
			log.Fatal(err)
		}
		switch own.State {
		case lease.StateHeld:
			fmt.Println("running elsewhere: show the composer read-only")
		case lease.StateNotFound:
			fmt.Println("never run")
		default: // released or expired: anyone may start a run
			fmt.Println("idle:", own.State)
		}
	}
	show()
	l, err := m.Acquire(ctx, key)
	if err != nil {
		log.Fatal(err)
	}
	show()
	if _, err := l.Release(ctx); err != nil {
		log.Fatal(err)
	}
	show()
	// Output:
	// never run
	// running elsewhere: show the composer read-only
	// idle: released
}

// AcquireWait blocks until the key is free, woken by the holder's release.
func ExampleManager_AcquireWait() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, pool := exampleManager(ctx)
	defer pool.Close()
	defer m.Close()

	key := conversation()
	first, err := m.Acquire(ctx, key)
	if err != nil {
		log.Fatal(err)
	}
	got := make(chan *lease.Lease)
	go func() {
		l, err := m.AcquireWait(ctx, key)
		if err != nil {
			log.Fatal(err)
		}
		got <- l
	}()
	if _, err := first.Release(ctx); err != nil {
		log.Fatal(err)
	}
	l := <-got
	defer func() { _, _ = l.Release(context.WithoutCancel(ctx)) }()
	fmt.Println("acquired after the release, with a larger token:", l.Token() > first.Token())
	// Output:
	// acquired after the release, with a larger token: true
}

// A CLI that does not keep the *Lease renews and releases by run_id.
func ExampleManager_Release() {
	ctx := context.Background()
	m, pool := exampleManager(ctx)
	defer pool.Close()
	defer m.Close()

	key := conversation()
	l, err := m.Acquire(ctx, key)
	if err != nil {
		log.Fatal(err)
	}
	runID := l.RunID() // what the CLI printed and got back later
	if _, err := m.Renew(ctx, key, runID); err != nil {
		log.Fatal(err)
	}
	for range 2 { // retry-safe: the repeat reports already-released
		res, err := m.Release(ctx, key, runID)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(res)
	}
	// Output:
	// released
	// already-released
}

// Resource gives each conversation its own guarded resources: a guard keeps
// one token mark per resource, so a resource shared by several keys would
// refuse one key's valid writes after another key's larger token.
func ExampleKey_Resource() {
	a := lease.Key{AccountID: "acct-1", SessionID: "conversation-42"}
	b := lease.Key{AccountID: "acct-1", SessionID: "conversation-43"}
	fmt.Println(a.Resource("reports"))
	fmt.Println(b.Resource("reports"))
	// Ids holding '/' cannot collide with other ids.
	fmt.Println(lease.Key{AccountID: "a/b", SessionID: "c"}.Resource("r") != lease.Key{AccountID: "a", SessionID: "b/c"}.Resource("r"))
	// Output:
	// acct-1/conversation-42/reports
	// acct-1/conversation-43/reports
	// true
}

// Takeover is "continue here": the browser takes the conversation over
// while the desktop's run is still alive; the desktop's context ends with
// ErrTakenOver.
func ExampleManager_Takeover() {
	ctx := context.Background()
	desktop, pool := exampleManager(ctx)
	defer pool.Close()
	defer desktop.Close()
	browser, pool2 := exampleManager(ctx)
	defer pool2.Close()
	defer browser.Close()

	key := conversation()
	old, err := desktop.Acquire(ctx, key, lease.WithHolder("desktop"))
	if err != nil {
		log.Fatal(err)
	}
	_, err = browser.Acquire(ctx, key)
	var held *lease.HeldError
	if errors.As(err, &held) {
		fmt.Println("held by", held.Holder)
	}
	l, err := browser.Takeover(ctx, key, lease.WithHolder("browser"))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _, _ = l.Release(context.WithoutCancel(ctx)) }()
	<-old.Done() // the desktop's Manager is notified at once
	fmt.Println("desktop:", context.Cause(old.Context()))
	fmt.Println("larger token:", l.Token() > old.Token())
	own, err := desktop.Inspect(ctx, key)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("now held by", own.Holder)
	// Output:
	// held by desktop
	// desktop: lease: taken over by another run
	// larger token: true
	// now held by browser
}

// A run of several calls moves between processes: the first replica parks
// the grant after its call, another replica (here a second Manager, as in
// another process) resumes it for the next call, with the same run_id and
// token.
func ExampleLease_Park() {
	ctx := context.Background()
	replicaA, pool := exampleManager(ctx)
	defer pool.Close()
	defer replicaA.Close()
	replicaB, err := lease.New(lease.Config{Pool: pool, Schema: "app"})
	if err != nil {
		log.Fatal(err)
	}
	defer replicaB.Close()

	key := conversation()
	first, err := replicaA.Acquire(ctx, key)
	if err != nil {
		log.Fatal(err)
	}
	// ... the first call's work under first.Context() has returned ...
	if err := first.Park(ctx, 10*time.Minute); err != nil {
		log.Fatal(err)
	}
	fmt.Println("first call's lease ended:", errors.Is(first.Err(), lease.ErrParked))
	run := first.RunID() // kept by the client (e.g. in the conversation's metadata)

	next, err := replicaB.Resume(ctx, key, run)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("same run and token:", next.RunID() == run && next.Token() == first.Token())
	_, err = replicaA.Resume(ctx, key, run)
	fmt.Println("active on the other replica:", errors.Is(err, lease.ErrRunActive))
	if _, err := next.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// first call's lease ended: true
	// same run and token: true
	// active on the other replica: true
}
