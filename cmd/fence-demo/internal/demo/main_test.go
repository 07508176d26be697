package demo_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fencekit/fencekit/cmd/fence-demo/internal/demo"
	"github.com/fencekit/fencekit/fencetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	if code == 0 {
		if err := goleak.Find(
			// Idle keep-alive connections of the minio clients' HTTP transports;
			// not goroutines this package starts.
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// services returns a Conn to the real services with a private schema and a
// fresh bucket (both removed when the test ends); it skips (fails under CI)
// when a service is missing.
func services(t *testing.T) demo.Conn {
	t.Helper()
	if testing.Short() {
		t.Skip("needs PostgreSQL and MinIO (not run with -short)")
	}
	schema := fencetest.Schema(t)
	_, bucket := fencetest.Bucket(t)
	mc, _ := fencetest.MinIOEnv()
	return demo.Conn{
		DatabaseURL:    fencetest.DatabaseURL(),
		MinIOEndpoint:  mc.Endpoint,
		MinIOAccessKey: mc.AccessKey,
		MinIOSecretKey: mc.SecretKey,
		Schema:         schema,
		Bucket:         bucket,
	}
}

// connArgs are the flags that point a subcommand at c.
func connArgs(c demo.Conn) []string {
	return []string{"--database-url", c.DatabaseURL, "--minio-endpoint", c.MinIOEndpoint,
		"--minio-access-key", c.MinIOAccessKey, "--minio-secret-key", c.MinIOSecretKey,
		"--schema", c.Schema, "--bucket", c.Bucket}
}

type result struct {
	code           int
	stdout, stderr string
}

// run calls demo.Main with an empty environment.
func run(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	code := demo.Main(ctx, args, demo.Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }})
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}
