package quickstart_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"

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
	app := connect(ctx)                                                 // the application's pool, MinIO client, schema, bucket
	defer app.close()
	pool, mc, schema, bucket := app.pool, app.mc, app.schema, app.bucket

	desktop, err := lease.New(lease.Config{Pool: pool, Schema: schema}) // one Manager per process
	check(err)
	defer desktop.Close()
	browser, err := lease.New(lease.Config{Pool: pool, Schema: schema}) // another process
	check(err)
	defer browser.Close()
	pg, err := pgguard.New(pgguard.Config{DB: pool, Schema: schema})
	check(err)
	store, err := s3guard.New(s3guard.Config{Client: minioclient.New(mc), Bucket: bucket})
	check(err)

	key := lease.Key{AccountID: "acme", SessionID: conversation()}
	// The tool needs only ctx: the guards take the lease's token from it.
	tool := func(ctx context.Context, text string) error {
		if _, err := store.PutBytes(ctx, key.Resource("report.txt"), []byte(text), s3guard.PutOptions{}); err != nil {
			return err
		}
		return pg.InTx(ctx, key.Resource("messages"), func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO `+app.messages+` (session_id, author, body) VALUES ($1, $2, $3)`,
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

	printMessages(ctx, app, key)
	// Output:
	// desktop run ended, taken over: true
	// late write refused as stale: true
	// user-7: draft from the desktop
	// user-7: final from the browser
}

// app is what an application has set up before it runs tools: a pgx pool, a
// minio-go client, a schema migrated for leases and guard marks with a
// messages table, and a bucket. The example makes its schema and bucket
// private (random names) and removes both in close, so runs never share
// state.
type app struct {
	pool     *pgxpool.Pool
	mc       *minio.Client
	schema   string
	bucket   string
	messages string // the quoted table name
}

// connect opens the services the example needs (TEST_DATABASE_URL and
// TEST_MINIO_*, as make test exports them) and creates the schema, table
// and bucket.
func connect(ctx context.Context) *app {
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	pool, err := pgxpool.New(ctx, url)
	check(err)
	id := strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	a := &app{pool: pool, schema: "quickstart_" + id, bucket: "quickstart-" + id}
	a.messages = pgx.Identifier{a.schema, "messages"}.Sanitize()
	a.mc, err = minio.New(os.Getenv("TEST_MINIO_ENDPOINT"), &minio.Options{
		Creds: credentials.NewStaticV4(os.Getenv("TEST_MINIO_ACCESS_KEY"), os.Getenv("TEST_MINIO_SECRET_KEY"), "")})
	check(err)
	check(a.mc.MakeBucket(ctx, a.bucket, minio.MakeBucketOptions{}))
	_, err = migrations.Migrate(ctx, pool, migrations.Options{Schema: a.schema}, migrations.Lease, migrations.Guard)
	check(err)
	_, err = pool.Exec(ctx, `CREATE TABLE `+a.messages+` (
		id bigserial PRIMARY KEY, session_id text NOT NULL, author text NOT NULL, body text NOT NULL)`)
	check(err)
	return a
}

// close removes the bucket (every object version first) and the schema,
// and closes the pool.
func (a *app) close() {
	ctx := context.Background()
	for obj := range a.mc.ListObjects(ctx, a.bucket, minio.ListObjectsOptions{Recursive: true, WithVersions: true}) {
		if obj.Err == nil {
			_ = a.mc.RemoveObject(ctx, a.bucket, obj.Key, minio.RemoveObjectOptions{VersionID: obj.VersionID})
		}
	}
	_ = a.mc.RemoveBucket(ctx, a.bucket)
	_ = migrations.DropSchema(ctx, a.pool, a.schema)
	a.pool.Close()
}

// conversation is a session id no earlier run of the example used.
func conversation() string { return "conv-" + uuid.NewString() }

func printMessages(ctx context.Context, a *app, key lease.Key) {
	rows, err := a.pool.Query(ctx, `SELECT author, body FROM `+a.messages+` WHERE session_id = $1 ORDER BY id`, key.SessionID)
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
