package demo_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/cmd/fence-demo/internal/demo"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/guards/pgguard"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	buildDir  string // removed by TestMain
)

// binary builds cmd/fence-demo once per test process and returns its path.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			buildErr = err
			return
		}
		root := filepath.Dir(strings.TrimSpace(string(dir)))
		if buildDir, buildErr = os.MkdirTemp("", "fence-demo-bin-"); buildErr != nil {
			return
		}
		binPath = filepath.Join(buildDir, "fence-demo")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/fence-demo")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return binPath
}

// exe runs the real binary with args and an empty environment.
func exe(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), args...)
	cmd.Env = []string{}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// written counts what the demo's subcommands have written under c: guard
// marks and report rows in PostgreSQL, and objects in the bucket (reports is
// the number of objects at report keys; the guard's own data objects under
// its prefix come on top, and must be zero too when nothing was written).
func written(t *testing.T, c demo.Conn) (marks, rows, reports int) {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, c.DatabaseURL)
	require.NoError(t, err)
	defer pool.Close()
	var reg *string
	require.NoError(t, pool.QueryRow(ctx, `SELECT to_regclass($1)::text`, c.Schema+"."+pgguard.MarksTable).Scan(&reg))
	if reg != nil {
		require.NoError(t, pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %q.%s`, c.Schema, pgguard.MarksTable)).Scan(&marks))
	}
	require.NoError(t, pool.QueryRow(ctx, `SELECT to_regclass($1)::text`, c.Schema+"."+demo.ReportsTable).Scan(&reg))
	if reg != nil {
		require.NoError(t, pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %q.%s`, c.Schema, demo.ReportsTable)).Scan(&rows))
	}
	mc, _ := fencetest.MinIOEnv()
	cl, err := minio.New(mc.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(mc.AccessKey, mc.SecretKey, "")})
	require.NoError(t, err)
	all := 0
	for obj := range cl.ListObjects(ctx, c.Bucket, minio.ListObjectsOptions{Recursive: true}) {
		require.NoError(t, obj.Err)
		all++
		if strings.HasSuffix(obj.Key, "/report.txt") { // S3Key
			reports++
		}
	}
	if reports == 0 {
		require.Zero(t, all, "no report, yet objects in the bucket")
	}
	return marks, rows, reports
}

// TestBinaryRefusesBadInputBeforeWriting runs the real fence-demo binary
// with input that must be refused as a usage error (exit 2) and checks that
// nothing was written to PostgreSQL or MinIO.
func TestBinaryRefusesBadInputBeforeWriting(t *testing.T) {
	c := services(t)
	id := uuid.NewString()
	long := strings.Repeat("/", 200) // escapes to 600 bytes: over the resource limit
	cases := []struct {
		name string
		args []string
	}{
		{"acquire with ttl 0", []string{"acquire", "--session", "s", "--ttl", "0"}},
		{"acquire with a negative ttl", []string{"acquire", "--session", "s", "--ttl", "-5s"}},
		{"renew with ttl 0", []string{"renew", "--session", "s", "--run-id", id, "--ttl", "0s"}},
		{"run id with outer spaces", []string{"renew", "--session", "s", "--run-id", " " + id + " "}},
		{"run id with outer characters", []string{"release", "--session", "s", "--run-id", "x" + id + "y"}},
		{"run id in braces", []string{"release", "--session", "s", "--run-id", "{" + id + "}"}},
		{"run id as urn", []string{"release", "--session", "s", "--run-id", "urn:uuid:" + id}},
		{"run id without hyphens", []string{"release", "--session", "s", "--run-id", strings.ReplaceAll(id, "-", "")}},
		{"put whose report name is too long", []string{"put", "--session", long, "--token", "5"}},
		{"put whose report name is too long, pg only", []string{"put", "--session", long, "--token", "5", "--store", "pg"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := exe(t, append(tc.args, connArgs(c)...)...)
			require.Equal(t, demo.ExitUsage, r.code, "stdout %q stderr %q", r.stdout, r.stderr)
			marks, rows, objects := written(t, c)
			require.Zero(t, marks+rows+objects, "nothing written: marks %d rows %d objects %d", marks, rows, objects)
		})
	}
}

// TestBinaryPutNeverUsageErrorAfterWrite: keys that used to be accepted by
// one store and refused by the other now either write both stores or
// nothing, and a write is never followed by a usage error.
func TestBinaryPutNeverUsageErrorAfterWrite(t *testing.T) {
	for _, tc := range []struct{ account, session string }{{"..", "x"}, {"acme", "a//b"}, {"acme", "."}, {"a b", "c"}} {
		t.Run(tc.account+"|"+tc.session, func(t *testing.T) {
			c := services(t)
			r := exe(t, append([]string{"put", "--account", tc.account, "--session", tc.session, "--token", "5"}, connArgs(c)...)...)
			marks, rows, objects := written(t, c)
			if r.code == demo.ExitUsage {
				require.Zero(t, marks+rows+objects, "a usage error wrote something: %s", r.stderr)
				return
			}
			require.Equal(t, demo.ExitOK, r.code, "stdout %q stderr %q", r.stdout, r.stderr)
			require.Equal(t, []int{1, 1, 1}, []int{marks, rows, objects}, "both stores written")
		})
	}
}

// TestBinarySessionsDoNotCollide: sessions ("a/b","c") and ("a","b/c") used
// to share one S3 key and one pg resource, so the second refused (or
// overwrote) the first's report. Each now has its own.
func TestBinarySessionsDoNotCollide(t *testing.T) {
	c := services(t)
	r := exe(t, append([]string{"put", "--account", "a/b", "--session", "c", "--token", "5"}, connArgs(c)...)...)
	require.Equal(t, demo.ExitOK, r.code, "%s", r.stderr)
	r = exe(t, append([]string{"put", "--account", "a", "--session", "b/c", "--token", "3"}, connArgs(c)...)...)
	require.Equal(t, demo.ExitOK, r.code, "the other session's lower token is not stale here: %s %s", r.stdout, r.stderr)
	marks, rows, objects := written(t, c)
	require.Equal(t, []int{2, 2, 2}, []int{marks, rows, objects})
	for _, s := range []struct{ account, session, mark string }{{"a/b", "c", "5"}, {"a", "b/c", "3"}} {
		r = exe(t, append([]string{"inspect", "--account", s.account, "--session", s.session}, connArgs(c)...)...)
		require.Equal(t, demo.ExitOK, r.code, "%s", r.stderr)
		require.Contains(t, r.stdout, "pg_mark="+s.mark+"\n")
		require.Contains(t, r.stdout, "s3_mark="+s.mark+"\n")
	}
}
