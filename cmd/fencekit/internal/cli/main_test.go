package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/syncbuf"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// binPath is the fencekit binary built once by TestMain into a temporary
// directory removed when the tests end.
var binPath string

func TestMain(m *testing.M) {
	code := func() int {
		dir, err := os.MkdirTemp("", "fencekit-cli-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		binPath = filepath.Join(dir, "fencekit")
		gomod, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			fmt.Fprintln(os.Stderr, "go env GOMOD:", err)
			return 1
		}
		build := exec.Command("go", "build", "-o", binPath, "./cmd/fencekit")
		build.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build ./cmd/fencekit: %v\n%s", err, out)
			return 1
		}
		return m.Run()
	}()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func bg() context.Context { return context.Background() }

// result is one run of the binary.
type result struct {
	code           int
	stdout, stderr string
	took           time.Duration
	args           []string
}

// lines are stdout's JSON objects; every line must be one.
func (r result) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimRight(r.stdout, "\n"), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), "stdout line is not a JSON object: %q\n%s", l, r)
		out = append(out, m)
	}
	return out
}

// one is stdout's single JSON object.
func (r result) one(t *testing.T) map[string]any {
	t.Helper()
	ls := r.lines(t)
	require.Len(t, ls, 1, "%s", r)
	return ls[0]
}

func (r result) String() string {
	return fmt.Sprintf("$ fencekit %s\nexit %d after %s\nstdout:\n%sstderr:\n%s", strings.Join(r.args, " "), r.code,
		r.took.Round(time.Millisecond), r.stdout, r.stderr)
}

// transcript is the run as an operator's terminal shows it.
func (r result) transcript(redact ...string) string {
	s := fmt.Sprintf("$ fencekit %s    # exit %d, %s\n%s%s", strings.Join(r.args, " "), r.code, r.took.Round(time.Millisecond), r.stdout, r.stderr)
	for i := 0; i+1 < len(redact); i += 2 {
		if redact[i] != "" {
			s = strings.ReplaceAll(s, redact[i], redact[i+1])
		}
	}
	return s
}

// fk runs the binary with args and no environment but env.
func fk(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String(), took: time.Since(start), args: args}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return r
}

// db is the environment naming the test database as $DATABASE_URL.
func db(url string) []string { return []string{"DATABASE_URL=" + url} }

// background is the binary running while the test does other things.
type background struct {
	cmd    *exec.Cmd
	args   []string
	start  time.Time
	lines  chan string // stdout, line by line
	stderr *syncbuf.Buffer
	errs   chan string // stderr, line by line
	done   chan result
}

// start runs the binary in the background; its stdout and stderr lines
// arrive on channels as it prints them. It is killed when the test ends.
func start(t *testing.T, env []string, args ...string) *background {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	cmd.Env = env
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	b := &background{cmd: cmd, args: args, lines: make(chan string, 100), errs: make(chan string, 100),
		stderr: &syncbuf.Buffer{}, done: make(chan result, 1)}
	b.start = time.Now()
	require.NoError(t, cmd.Start())
	var wg sync.WaitGroup
	var out syncbuf.Buffer
	pump := func(r io.Reader, ch chan string, buf *syncbuf.Buffer) {
		defer wg.Done()
		defer close(ch)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			_, _ = buf.Write(append(sc.Bytes(), '\n'))
			select {
			case ch <- sc.Text():
			default: // nobody reads this channel: the buffer keeps it
			}
		}
	}
	wg.Add(2)
	go pump(stdout, b.lines, &out)
	go pump(stderr, b.errs, b.stderr)
	go func() {
		wg.Wait()
		err := cmd.Wait()
		r := result{args: args, took: time.Since(b.start), stdout: out.String(), stderr: b.stderr.String()}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			r.code = ee.ExitCode()
		} else if err != nil {
			r.code = -1
		}
		b.done <- r
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-b.done:
		case <-time.After(10 * time.Second):
		}
	})
	return b
}

// line waits for the next stdout line.
func (b *background) line(t *testing.T, within time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-b.lines:
		require.True(t, ok, "the command ended; stderr: %s", b.stderr.String())
		return l
	case <-time.After(within):
		t.Fatalf("no output line within %s; stderr: %s", within, b.stderr.String())
	}
	return ""
}

// stderrLine waits for a stderr line containing s.
func (b *background) stderrLine(t *testing.T, s string, within time.Duration) string {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case l, ok := <-b.errs:
			require.True(t, ok, "the command ended without printing %q; stderr: %s", s, b.stderr.String())
			if strings.Contains(l, s) {
				return l
			}
		case <-deadline:
			t.Fatalf("no stderr line with %q within %s; stderr: %s", s, within, b.stderr.String())
		}
	}
}

// wait waits for the command to end.
func (b *background) wait(t *testing.T, within time.Duration) result {
	t.Helper()
	select {
	case r := <-b.done:
		return r
	case <-time.After(within):
		t.Fatalf("still running after %s; stderr: %s", within, b.stderr.String())
	}
	return result{}
}

// dump is every row of every table and the state of every sequence in the
// schemas, plus the list of their relations and columns: equal dumps mean
// nothing was changed.
func dump(t *testing.T, pool *pgxpool.Pool, schemas ...string) string {
	t.Helper()
	var b strings.Builder
	for _, s := range schemas {
		rows, err := pool.Query(bg(), `SELECT c.relname, c.relkind::text,
       coalesce((SELECT string_agg(a.attname || ':' || format_type(a.atttypid, a.atttypmod), ',' ORDER BY a.attnum)
                   FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), '')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = $1 ORDER BY c.relname`, s)
		require.NoError(t, err)
		type rel struct{ name, kind, cols string }
		var rels []rel
		for rows.Next() {
			var r rel
			require.NoError(t, rows.Scan(&r.name, &r.kind, &r.cols))
			rels = append(rels, r)
		}
		require.NoError(t, rows.Err())
		for _, r := range rels {
			fmt.Fprintf(&b, "%s.%s %s (%s)\n", s, r.name, r.kind, r.cols)
			var data string
			switch r.kind {
			case "r":
				require.NoError(t, pool.QueryRow(bg(), fmt.Sprintf(`SELECT coalesce(string_agg(t::text, E'\n' ORDER BY t::text), '') FROM %q.%q t`, s, r.name)).Scan(&data))
			case "S":
				require.NoError(t, pool.QueryRow(bg(), fmt.Sprintf(`SELECT last_value::text || ' ' || is_called::text FROM %q.%q`, s, r.name)).Scan(&data))
			}
			b.WriteString(data + "\n")
		}
	}
	return b.String()
}
