package quickstart_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/guards/s3guard"
	"github.com/fencekit/fencekit/guards/s3guard/minioclient"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

type userKey struct{}

// Example is the quick start of README.md (make lint checks that the README
// shows these lines).
func Example() {
	ctx := context.WithValue(context.Background(), userKey{}, "user-7") // the request's values
	pool, mc := connect(ctx)                                            // the application's pgx pool and minio-go client
	defer pool.Close()

	desktop, err := lease.New(lease.Config{Pool: pool, Schema: "app"}) // one Manager per process
	check(err)
	defer desktop.Close()
	browser, err := lease.New(lease.Config{Pool: pool, Schema: "app"}) // another process
	check(err)
	defer browser.Close()
	pg, err := pgguard.New(pgguard.Config{DB: pool, Schema: "app"})
	check(err)
	store, err := s3guard.New(s3guard.Config{Client: minioclient.New(mc), Bucket: "quickstart"})
	check(err)

	key := lease.Key{AccountID: "acme", SessionID: conversation()}
	// The tool needs only ctx: the guards take the lease's token from it.
	tool := func(ctx context.Context, text string) error {
		if _, err := store.PutBytes(ctx, key.Resource("report.txt"), []byte(text), s3guard.PutOptions{}); err != nil {
			return err
		}
		return pg.InTx(ctx, pool, key.Resource("messages"), func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO app.messages (session_id, author, body) VALUES ($1, $2, $3)`,
				key.SessionID, ctx.Value(userKey{}), text) // the caller's values reach the write
			return err
		})
	}

	a, err := desktop.Acquire(ctx, key, lease.WithHolder("desktop"))
	check(err)
	check(tool(a.Context(), "draft from the desktop"))

	b, err := browser.Takeover(ctx, key, lease.WithHolder("browser")) // "continue here"
	check(err)
	check(tool(b.Context(), "final from the browser"))
	<-a.Done() // the desktop run is told at once
	fmt.Println("desktop run ended, taken over:", errors.Is(context.Cause(a.Context()), lease.ErrTakenOver))

	// The desktop was paused: its write arrives late, still carrying its token.
	err = tool(context.WithoutCancel(a.Context()), "late draft")
	fmt.Println("late write refused as stale:", errors.Is(err, fence.ErrStale))

	printMessages(ctx, pool, key)
	// Output:
	// desktop run ended, taken over: true
	// late write refused as stale: true
	// user-7: draft from the desktop
	// user-7: final from the browser
}

// connect opens the services the example needs and prepares its schema,
// table and bucket (what an application has set up before it runs tools).
func connect(ctx context.Context) (*pgxpool.Pool, *minio.Client) {
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	pool, err := pgxpool.New(ctx, url)
	check(err)
	_, err = migrations.Migrate(ctx, pool, migrations.Options{Schema: "app"}, migrations.Lease, migrations.Guard)
	check(err)
	_, err = pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS app.messages (
		id bigserial PRIMARY KEY, session_id text NOT NULL, author text NOT NULL, body text NOT NULL)`)
	check(err)
	mc, err := minio.New(os.Getenv("TEST_MINIO_ENDPOINT"), &minio.Options{
		Creds: credentials.NewStaticV4(os.Getenv("TEST_MINIO_ACCESS_KEY"), os.Getenv("TEST_MINIO_SECRET_KEY"), "")})
	check(err)
	if ok, err := mc.BucketExists(ctx, "quickstart"); err != nil {
		log.Fatal(err)
	} else if !ok {
		check(mc.MakeBucket(ctx, "quickstart", minio.MakeBucketOptions{}))
	}
	return pool, mc
}

// conversation is a session id no earlier run of the example used.
func conversation() string { return "conv-" + uuid.NewString() }

func printMessages(ctx context.Context, pool *pgxpool.Pool, key lease.Key) {
	rows, err := pool.Query(ctx, `SELECT author, body FROM app.messages WHERE session_id = $1 ORDER BY id`, key.SessionID)
	check(err)
	for rows.Next() {
		var author, body string
		check(rows.Scan(&author, &body))
		fmt.Printf("%s: %s\n", author, body)
	}
	check(rows.Err())
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
