package s3guard

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/guards/internal/engine"
	"github.com/fencekit/fencekit/guards/s3guard/awsclient"
	"github.com/fencekit/fencekit/guards/s3guard/minioclient"
	"github.com/fencekit/fencekit/guards/s3guard/s3client"
)

func TestMain(m *testing.M) {
	// Every test and example here needs MinIO. Without it, skip the package
	// (as fencetest.Missing would skip each test), except under CI, where the
	// tests run and fail loudly. In -short mode skip it always.
	flag.Parse()
	if testing.Short() {
		fmt.Println("s3guard: every test needs MinIO, skipped in -short mode")
		os.Exit(0)
	}
	if _, ok := fencetest.MinIOEnv(); !ok && !fencetest.InCI() {
		fmt.Println("s3guard: TEST_MINIO_ENDPOINT is not set, skipping (run `make services` and export what it prints)")
		os.Exit(0)
	}
	goleak.VerifyTestMain(m,
		// Idle keep-alive connections of the HTTP transports the minio
		// clients share; they are not goroutines this package starts.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// clientKind is one s3client adapter the whole suite runs with.
type clientKind struct {
	name string
	// connect returns a new SDK client for the test MinIO, as a separate
	// process would have, optionally with its own transport.
	connect func(t testing.TB, rt http.RoundTripper) s3client.Client
	// retriesAll: the SDK retries every transport error (aws-sdk-go-v2's
	// standard retryer), not only those minio-go deems transient.
	retriesAll bool
}

// clientKinds are the adapters every MinIO test runs with.
var clientKinds = []clientKind{
	{name: "minio", connect: connectMinIO},
	{name: "aws", connect: connectAWS, retriesAll: true},
}

func connectMinIO(t testing.TB, rt http.RoundTripper) s3client.Client {
	t.Helper()
	c := minioEnv(t)
	client, err := minio.New(c.Endpoint, &minio.Options{
		Creds:     credentials.NewStaticV4(c.AccessKey, c.SecretKey, ""),
		Transport: rt,
	})
	require.NoError(t, err)
	return minioclient.New(client)
}

func connectAWS(t testing.TB, rt http.RoundTripper) s3client.Client {
	t.Helper()
	c := minioEnv(t)
	if rt == nil {
		rt = http.DefaultTransport
	}
	client := s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String("http://" + c.Endpoint),
		UsePathStyle: true,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: c.AccessKey, SecretAccessKey: c.SecretKey, Source: "test"}, nil
		}),
		HTTPClient: &http.Client{Transport: rt},
	})
	return awsclient.New(client)
}

func minioEnv(t testing.TB) fencetest.MinIOConfig {
	t.Helper()
	c, ok := fencetest.MinIOEnv()
	if !ok {
		fencetest.Missing(t, "TEST_MINIO_ENDPOINT is not set")
	}
	return c
}

// forEachKind runs f as one subtest per adapter.
func forEachKind(t *testing.T, f func(t *testing.T, kind clientKind)) {
	for _, kind := range clientKinds {
		t.Run(kind.name, func(t *testing.T) { f(t, kind) })
	}
}

// forEachClient runs f as one subtest per adapter, each with a fresh bucket.
func forEachClient(t *testing.T, f func(t *testing.T, e env)) {
	forEachKind(t, func(t *testing.T, kind clientKind) { f(t, newEnv(t, kind)) })
}

// forEachClientB is forEachClient for benchmarks.
func forEachClientB(b *testing.B, f func(b *testing.B, e env)) {
	for _, kind := range clientKinds {
		b.Run(kind.name, func(b *testing.B) { f(b, newEnv(b, kind)) })
	}
}

// env is one fresh bucket on the test MinIO, reached through one adapter.
type env struct {
	kind   clientKind
	client s3client.Client // the adapter under test
	raw    *minio.Client   // plain requests that bypass the guard
	bucket string
}

func newEnv(t testing.TB, kind clientKind) env {
	t.Helper()
	c, b := fencetest.Bucket(t)
	return env{kind: kind, client: kind.connect(t, nil), raw: c, bucket: b}
}

// newClient returns another client of e's kind, as a separate process would
// have, optionally with its own transport.
func (e env) newClient(t testing.TB, rt http.RoundTripper) s3client.Client {
	t.Helper()
	return e.kind.connect(t, rt)
}

func (e env) store(t testing.TB, client s3client.Client, mod func(*Config)) *Guard {
	t.Helper()
	if client == nil {
		client = e.client
	}
	cfg := Config{Client: client, Bucket: e.bucket}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	require.NoError(t, err)
	return s
}

func put(t testing.TB, s *Guard, key string, tok fence.Token, body string) (Info, error) {
	t.Helper()
	return s.PutBytes(fence.WithClaim(testCtx(t), fence.ClaimFor(testCtx(t), tok)), key, []byte(body), PutOptions{ContentType: "text/plain"})
}

// content reads key through the guard and fails the test on error.
func content(t testing.TB, s *Guard, key string) (string, Info) {
	t.Helper()
	b, info, err := s.GetBytes(testCtx(t), key)
	require.NoError(t, err)
	return string(b), info
}

// rawGet reads an object directly, bypassing the guard.
func (e env) rawGet(t testing.TB, key string) ([]byte, minio.ObjectInfo, error) {
	t.Helper()
	obj, err := e.raw.GetObject(testCtx(t), e.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, minio.ObjectInfo{}, err
	}
	defer obj.Close()
	b, err := io.ReadAll(obj)
	if err != nil {
		return nil, minio.ObjectInfo{}, err
	}
	st, err := obj.Stat()
	return b, st, err
}

func (e env) rawPut(t testing.TB, key string, body []byte, opts minio.PutObjectOptions) (minio.UploadInfo, error) {
	t.Helper()
	return e.raw.PutObject(testCtx(t), e.bucket, key, bytes.NewReader(body), int64(len(body)), opts)
}

// listAll returns every object key in the bucket.
func (e env) listAll(t testing.TB) []string {
	t.Helper()
	var keys []string
	for obj := range e.raw.ListObjectsIter(testCtx(t), e.bucket, minio.ListObjectsOptions{Recursive: true}) {
		require.NoError(t, obj.Err)
		keys = append(keys, obj.Key)
	}
	return keys
}

// snapshot maps every object key to its ETag, to prove nothing changed.
func (e env) snapshot(t testing.TB) map[string]string {
	t.Helper()
	m := map[string]string{}
	for obj := range e.raw.ListObjectsIter(testCtx(t), e.bucket, minio.ListObjectsOptions{Recursive: true}) {
		require.NoError(t, obj.Err)
		m[obj.Key] = obj.ETag
	}
	return m
}

// newWriteID is the guard's write id generator.
var newWriteID = engine.NewWriteID
