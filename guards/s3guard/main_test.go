package s3guard

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testsvc"
)

func TestMain(m *testing.M) {
	// Every test and example here needs MinIO. Without it, skip the package
	// (as testsvc.Missing would skip each test), except under CI, where the
	// tests run and fail loudly.
	if _, ok := testsvc.MinIOEnv(); !ok && !testsvc.InCI() {
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

// env is one fresh bucket on the test MinIO.
type env struct {
	client *minio.Client
	bucket string
}

func newEnv(t testing.TB) env {
	t.Helper()
	c, b := testsvc.MinIO(t)
	return env{client: c, bucket: b}
}

// newClient returns another client for the test MinIO, as a separate
// process would have, optionally with its own transport.
func newClient(t testing.TB, rt http.RoundTripper) *minio.Client {
	t.Helper()
	c, ok := testsvc.MinIOEnv()
	if !ok {
		testsvc.Missing(t, "TEST_MINIO_ENDPOINT is not set")
	}
	client, err := minio.New(c.Endpoint, &minio.Options{
		Creds:     credentials.NewStaticV4(c.AccessKey, c.SecretKey, ""),
		Transport: rt,
	})
	require.NoError(t, err)
	return client
}

func (e env) store(t testing.TB, client *minio.Client, mod func(*Config)) *Store {
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

func put(t testing.TB, s *Store, key string, tok fence.Token, body string) (Info, error) {
	t.Helper()
	return s.PutBytes(testCtx(t), key, tok, []byte(body), PutOptions{ContentType: "text/plain"})
}

// content reads key through the guard and fails the test on error.
func content(t testing.TB, s *Store, key string) (string, Info) {
	t.Helper()
	b, info, err := s.GetBytes(testCtx(t), key)
	require.NoError(t, err)
	return string(b), info
}

// rawGet reads an object directly, bypassing the guard.
func (e env) rawGet(t testing.TB, key string) ([]byte, minio.ObjectInfo, error) {
	t.Helper()
	obj, err := e.client.GetObject(testCtx(t), e.bucket, key, minio.GetObjectOptions{})
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
	return e.client.PutObject(testCtx(t), e.bucket, key, bytes.NewReader(body), int64(len(body)), opts)
}

// listAll returns every object key in the bucket.
func (e env) listAll(t testing.TB) []string {
	t.Helper()
	var keys []string
	for obj := range e.client.ListObjectsIter(testCtx(t), e.bucket, minio.ListObjectsOptions{Recursive: true}) {
		require.NoError(t, obj.Err)
		keys = append(keys, obj.Key)
	}
	return keys
}

// snapshot maps every object key to its ETag, to prove nothing changed.
func (e env) snapshot(t testing.TB) map[string]string {
	t.Helper()
	m := map[string]string{}
	for obj := range e.client.ListObjectsIter(testCtx(t), e.bucket, minio.ListObjectsOptions{Recursive: true}) {
		require.NoError(t, obj.Err)
		m[obj.Key] = obj.ETag
	}
	return m
}
