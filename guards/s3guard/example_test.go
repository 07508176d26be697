package s3guard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/guards/s3guard"
	"github.com/fencekit/fencekit/guards/s3guard/awsclient"
	"github.com/fencekit/fencekit/guards/s3guard/minioclient"
)

// exampleGuard connects to the test MinIO (TEST_MINIO_* variables, see
// `make services`) and makes a bucket for one example.
func exampleGuard(ctx context.Context) (*s3guard.Guard, func()) {
	return exampleGuardWith(ctx, s3guard.Config{})
}

// exampleGuardWith is exampleGuard with Client and Bucket filled into cfg.
func exampleGuardWith(ctx context.Context, cfg s3guard.Config) (*s3guard.Guard, func()) {
	env, _ := fencetest.MinIOEnv()
	client, err := minio.New(env.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(env.AccessKey, env.SecretKey, "")})
	if err != nil {
		panic(err)
	}
	bucket := strings.ReplaceAll(fencetest.RandomName("fk-example-"), "_", "-")
	if err := client.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		panic(err)
	}
	cfg.Client, cfg.Bucket = minioclient.New(client), bucket
	store, err := s3guard.New(cfg)
	if err != nil {
		panic(err)
	}
	return store, func() {
		for obj := range client.ListObjectsIter(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
			_ = client.RemoveObject(ctx, bucket, obj.Key, minio.RemoveObjectOptions{})
		}
		_ = client.RemoveBucket(ctx, bucket)
	}
}

// Run A holds token 7 and stalls; run B takes over with token 8 and writes
// the very same bytes. A's late write is refused all the same. Each run's ctx
// carries its claim (a lease context does; fence.WithClaim here), so the
// writes need no token argument.
func Example() {
	ctx := context.Background()
	store, cleanup := exampleGuard(ctx)
	defer cleanup()
	runA := fence.WithClaim(ctx, fence.Claim{Token: 7, Run: "run-a"})
	runB := fence.WithClaim(ctx, fence.Claim{Token: 8, Run: "run-b"})

	report := []byte(`{"total": 42}`)
	if _, err := store.PutBytes(runA, "reports/q3.json", report, s3guard.PutOptions{ContentType: "application/json"}); err != nil {
		panic(err)
	}
	if _, err := store.PutBytes(runB, "reports/q3.json", report, s3guard.PutOptions{ContentType: "application/json"}); err != nil {
		panic(err)
	}
	_, err := store.PutBytes(runA, "reports/q3.json", report, s3guard.PutOptions{})
	if se, ok := fence.IsStale(err); ok {
		fmt.Printf("token %d refused: object has accepted %d\n", se.Presented, se.Highest)
	}

	body, info, err := store.GetBytes(ctx, "reports/q3.json")
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s written by token %d of %s (%s)\n", body, info.Token, info.Run, info.ContentType)
	// Output:
	// token 7 refused: object has accepted 8
	// {"total": 42} written by token 8 of run-b (application/json)
}

// A token granted twice (say, by a database promoted from a lagging replica)
// is caught at the object: the same token from another run is refused with
// *fence.ReusedError. A ctx without a claim is refused before any request.
func ExampleGuard_PutBytes_reused() {
	ctx := context.Background()
	store, cleanup := exampleGuard(ctx)
	defer cleanup()
	first := fence.WithClaim(ctx, fence.Claim{Token: 5, Run: "run-a"})
	again := fence.WithClaim(ctx, fence.Claim{Token: 5, Run: "run-b"})

	if _, err := store.PutBytes(first, "notes.txt", []byte("a"), s3guard.PutOptions{}); err != nil {
		panic(err)
	}
	_, err := store.PutBytes(again, "notes.txt", []byte("b"), s3guard.PutOptions{})
	if re, ok := fence.IsReused(err); ok {
		fmt.Printf("token %d reused: mark set by %s, write from %s\n", re.Token, re.MarkRun, re.Run)
	}
	_, err = store.PutBytes(ctx, "notes.txt", []byte("c"), s3guard.PutOptions{})
	fmt.Println(errors.Is(err, fence.ErrNoToken))
	// Output:
	// token 5 reused: mark set by run-a, write from run-b
	// true
}

// A Guard over an aws-sdk-go-v2 client: wrap the *s3.Client the program
// already has with awsclient.New (here pointed at the test MinIO).
func ExampleNew_awsClient() {
	ctx := context.Background()
	env, _ := fencetest.MinIOEnv()
	client := s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String("http://" + env.Endpoint),
		UsePathStyle: true, // MinIO
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: env.AccessKey, SecretAccessKey: env.SecretKey}, nil
		}),
	})
	bucket := strings.ReplaceAll(fencetest.RandomName("fk-example-"), "_", "-")
	if _, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		panic(err)
	}
	defer func() {
		out, _ := client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
		for _, o := range out.Contents {
			_, _ = client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: o.Key})
		}
		_, _ = client.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(bucket)})
	}()

	store, err := s3guard.New(s3guard.Config{Client: awsclient.New(client), Bucket: bucket})
	if err != nil {
		panic(err)
	}
	work := fence.WithToken(ctx, 3)
	if _, err := store.PutBytes(work, "a.txt", []byte("via aws-sdk-go-v2"), s3guard.PutOptions{}); err != nil {
		panic(err)
	}
	body, info, err := store.GetBytes(ctx, "a.txt")
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s, token %d\n", body, info.Token)
	// Output:
	// via aws-sdk-go-v2, token 3
}

// Fence is the fence.Guard method: the write callback stages content, which
// becomes visible only when the conditional pointer write after it succeeds.
func ExampleGuard_Fence() {
	ctx := context.Background()
	store, cleanup := exampleGuard(ctx)
	defer cleanup()

	var guard fence.Guard = store
	err := guard.Fence(ctx, "sessions/s1/transcript.txt", 3, func(ctx context.Context) error {
		tok, _ := fence.FromContext(ctx)
		text := fmt.Sprintf("written under token %d", tok)
		return s3guard.Stage(ctx, strings.NewReader(text), int64(len(text)), s3guard.PutOptions{ContentType: "text/plain"})
	})
	if err != nil {
		panic(err)
	}
	body, info, err := store.GetBytes(ctx, "sessions/s1/transcript.txt")
	if err != nil {
		panic(err)
	}
	fmt.Printf("%q, mark %d\n", body, info.Token)
	// Output:
	// "written under token 3", mark 3
}

// Delete writes a fenced tombstone: the resource reads as not found, and the mark
// it keeps refuses older writers.
func ExampleGuard_Delete() {
	ctx := context.Background()
	store, cleanup := exampleGuard(ctx)
	defer cleanup()

	if _, err := store.PutBytes(fence.WithClaim(ctx, fence.ClaimFor(ctx, 4)), "draft.md", []byte("# draft"), s3guard.PutOptions{}); err != nil {
		panic(err)
	}
	if _, err := store.Delete(fence.WithClaim(ctx, fence.ClaimFor(ctx, 5)), "draft.md"); err != nil {
		panic(err)
	}
	_, _, err := store.GetBytes(ctx, "draft.md")
	var nf *fence.NotFoundError
	if errors.As(err, &nf) {
		fmt.Printf("not found: deleted=%v under token %d\n", nf.Deleted, nf.Token)
	}
	_, err = store.PutBytes(fence.WithClaim(ctx, fence.ClaimFor(ctx, 4)), "draft.md", []byte("# late"), s3guard.PutOptions{})
	fmt.Println(errors.Is(err, fence.ErrStale))
	// Output:
	// not found: deleted=true under token 5
	// true
}

// Mark reads a resource's high-water mark; Sweep removes data objects that can
// never become visible again (here: content kept by KeepSuperseded).
func ExampleGuard_Sweep() {
	ctx := context.Background()
	store, cleanup := exampleGuardWith(ctx, s3guard.Config{KeepSuperseded: true})
	defer cleanup()
	for tok := fence.Token(1); tok <= 3; tok++ {
		if _, err := store.PutBytes(fence.WithClaim(ctx, fence.ClaimFor(ctx, tok)), "log.txt", []byte(fmt.Sprintf("v%d", tok)), s3guard.PutOptions{}); err != nil {
			panic(err)
		}
	}
	mark, err := store.Mark(ctx, "log.txt")
	if err != nil {
		panic(err)
	}
	removed, err := store.Sweep(ctx, "log.txt")
	if err != nil {
		panic(err)
	}
	body, _, err := store.GetBytes(ctx, "log.txt")
	if err != nil {
		panic(err)
	}
	fmt.Printf("mark %d, swept %d, content %s\n", mark.Token, removed, body)
	// Output:
	// mark 3, swept 2, content v3
}
