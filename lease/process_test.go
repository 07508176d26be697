package lease_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
)

// helperEnv switches the test binary into the child role of
// TestProcessLossSIGKILL (see TestMain).
const helperEnv = "FENCEKIT_LEASE_HELPER"

// helperMain is the child process: it acquires the lease named by its
// environment, prints "ACQUIRED <token> <run_id>" and keeps renewing until
// it is killed.
func helperMain() int {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, fencetest.DatabaseURL())
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper: pool:", err)
		return 1
	}
	ttl, err := time.ParseDuration(os.Getenv("FK_TTL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper: ttl:", err)
		return 1
	}
	m, err := lease.New(lease.Config{Pool: pool, Schema: os.Getenv("FK_SCHEMA"), TTL: ttl})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper: manager:", err)
		return 1
	}
	l, err := m.Acquire(ctx, lease.Key{AccountID: os.Getenv("FK_ACCOUNT"), SessionID: os.Getenv("FK_SESSION")})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper: acquire:", err)
		return 1
	}
	fmt.Printf("ACQUIRED %d %s\n", l.Token(), l.RunID())
	time.Sleep(time.Hour) // renewing in the background until SIGKILL
	return 0
}

// TestProcessLossSIGKILL: a child process holding a lease is killed with
// SIGKILL (no release, no cleanup). Another Manager cannot acquire the key
// before the database expiry, and can after it, with a larger token.
func TestProcessLossSIGKILL(t *testing.T) {
	e := newEnv(t)
	k := uniqueKey(t)
	const ttl = 2 * time.Second
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1", "FK_SCHEMA="+e.schema, "FK_ACCOUNT="+k.AccountID,
		"FK_SESSION="+k.SessionID, "FK_TTL="+ttl.String())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "ACQUIRED ") {
				lines <- sc.Text()
				break
			}
		}
		close(lines)
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(30 * time.Second):
		t.Fatal("child did not acquire")
	}
	require.NotEmpty(t, line, "child exited without acquiring")
	var childToken int64
	var childRun string
	_, err = fmt.Sscanf(line, "ACQUIRED %d %s", &childToken, &childRun)
	require.NoError(t, err)
	childRunID := uuid.MustParse(childRun)

	other := e.manager(lease.Config{})
	_, err = other.Acquire(bg(), k)
	he, ok := isHeld(err)
	require.True(t, ok, "want ErrHeld while the child lives, got %v", err)
	require.Equal(t, childRunID, he.RunID)

	// The child is alive and renewing: its row's renewed_at advances.
	first, _ := e.row(k)
	waitFor(t, 10*time.Second, "child renewal", func() bool {
		r, _ := e.row(k)
		return r.RenewedAt.After(first.RenewedAt)
	})

	require.NoError(t, cmd.Process.Kill()) // SIGKILL
	killed = true
	_ = cmd.Wait()
	require.Equal(t, -1, cmd.ProcessState.ExitCode(), "killed by a signal")

	// Before expiry: still held by the dead child.
	_, err = other.Acquire(bg(), k)
	he, ok = isHeld(err)
	require.True(t, ok, "want ErrHeld right after the kill, got %v", err)
	require.Equal(t, childRunID, he.RunID)
	require.Greater(t, he.Remaining, time.Duration(0))

	// After expiry (waiting on the database's own view): acquired.
	waitFor(t, ttl+10*time.Second, "database expiry of the dead child's lease", func() bool {
		st, err := other.Inspect(bg(), k)
		require.NoError(t, err)
		return st.State == lease.StateExpired
	})
	l, err := other.Acquire(bg(), k)
	require.NoError(t, err)
	require.Greater(t, l.Token(), fence.Token(childToken))
	t.Logf("child token %d killed; taken over after expiry with token %d", childToken, l.Token())
}
