package demo_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/cmd/fence-demo/internal/demo"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lease"
)

// TestUsageErrors needs no service: every case is refused before any I/O,
// with ExitUsage and one error line naming the command.
func TestUsageErrors(t *testing.T) {
	valid := uuid.NewString()
	cases := []struct {
		name string
		args []string
	}{
		{"unknown command", []string{"frobnicate"}},
		{"unknown flag", []string{"--no-such-flag"}},
		{"unknown subcommand flag", []string{"inspect", "--session", "s", "--bogus"}},
		{"positional argument", []string{"inspect", "--session", "s", "extra"}},
		{"acquire without session", []string{"acquire"}},
		{"bad schema", []string{"acquire", "--session", "s", "--schema", "Not-An-Identifier"}},
		{"ttl below the minimum", []string{"acquire", "--session", "s", "--ttl", "1ms"}},
		{"control character in session", []string{"inspect", "--session", "a\x01b"}},
		{"renew without run id", []string{"renew", "--session", "s"}},
		{"renew with a bad run id", []string{"renew", "--session", "s", "--run-id", "run-42"}},
		{"release with the zero run id", []string{"release", "--session", "s", "--run-id", uuid.Nil.String()}},
		{"put without token", []string{"put", "--session", "s"}},
		{"put with a non-numeric token", []string{"put", "--session", "s", "--token", "abc"}},
		{"put with token zero", []string{"put", "--session", "s", "--token", "0"}},
		{"put with a negative token", []string{"put", "--session", "s", "--token", "-5"}},
		{"put with a leading zero", []string{"put", "--session", "s", "--token", "007"}},
		{"put with an unknown store", []string{"put", "--session", "s", "--token", "3", "--store", "ftp"}},
		{"bad colour mode", []string{"run", "--color", "sometimes"}},
		{"timeline not svg", []string{"run", "--timeline", "out.png"}},
		{"bad minio endpoint", []string{"run", "--minio-endpoint", "no-port"}},
		{"renew ok id but bad ttl", []string{"renew", "--session", "s", "--run-id", valid, "--ttl", "-1s"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := run(t, c.args...)
			require.Equal(t, demo.ExitUsage, r.code, "stdout %q stderr %q", r.stdout, r.stderr)
			require.True(t, strings.HasPrefix(r.stderr, "fence-demo"), "error names the program: %q", r.stderr)
			require.NotContains(t, r.stdout, "run_id=", "nothing was done")
		})
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}, {"-h"}, {"run", "--help"}, {"acquire", "--help"},
		{"renew", "-h"}, {"release", "--help"}, {"inspect", "--help"}, {"put", "--help"}} {
		r := run(t, args...)
		require.Equal(t, demo.ExitOK, r.code, "%v: %s", args, r.stderr)
		require.Contains(t, r.stdout, "Usage:", "%v", args)
		require.Contains(t, r.stdout, "Exit codes:", "%v", args)
		require.Empty(t, r.stderr, "%v", args)
	}
}

func TestExitCode(t *testing.T) {
	_, perr := fence.Parse("x")
	cases := []struct {
		err  error
		want int
	}{
		{nil, demo.ExitOK},
		{&demo.UsageError{Msg: "x"}, demo.ExitUsage},
		{perr, demo.ExitUsage},
		{&lease.KeyError{Field: "SessionID", Reason: "empty"}, demo.ExitUsage},
		{&lease.HeldError{}, demo.ExitRefused},
		{fmt.Errorf("wrapped: %w", lease.ErrLost), demo.ExitRefused},
		{&fence.StaleError{Resource: "r", Presented: 1, Highest: 2}, demo.ExitRefused},
		{fmt.Errorf("%w: no", lease.ErrUnauthorized), demo.ExitRefused},
		{demo.ErrNotHolder, demo.ExitRefused},
		{&demo.CheckError{Failed: []string{"x"}}, demo.ExitFailed},
		{&demo.ServiceError{Service: "MinIO", Addr: "x", Err: errors.New("down")}, demo.ExitFailed},
		{errors.New("anything else"), demo.ExitFailed},
	}
	for _, c := range cases {
		require.Equal(t, c.want, demo.ExitCode(c.err), "%v", c.err)
	}
}

// jsonOut decodes a subcommand's --json output.
func jsonOut(t *testing.T, r result) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &m), "stdout %q stderr %q", r.stdout, r.stderr)
	return m
}

// TestSubcommands explores one session by hand, as across terminals, and
// checks each step's exit code and result.
func TestSubcommands(t *testing.T) {
	conn := services(t)
	sess := "cli-" + uuid.NewString()[:8]
	cmd := func(name string, extra ...string) result {
		return run(t, append(append([]string{name, "--json", "--session", sess}, connArgs(conn)...), extra...)...)
	}

	ins := cmd("inspect")
	require.Equal(t, demo.ExitOK, ins.code, ins.stderr)
	require.Equal(t, "not-found", jsonOut(t, ins)["status"])

	acq := cmd("acquire", "--ttl", "1m")
	require.Equal(t, demo.ExitOK, acq.code, acq.stderr)
	m := jsonOut(t, acq)
	runID, tok := m["run_id"].(string), int64(m["token"].(float64))
	require.NotEmpty(t, runID)
	require.Positive(t, tok)

	// The lease outlives the acquire process (not released at exit).
	held := cmd("acquire")
	require.Equal(t, demo.ExitRefused, held.code, held.stderr)
	hm := jsonOut(t, held)
	require.Equal(t, runID, hm["holder_run_id"])
	require.Equal(t, float64(tok), hm["holder_token"])

	ins = cmd("inspect")
	require.Equal(t, demo.ExitOK, ins.code, ins.stderr)
	im := jsonOut(t, ins)
	require.Equal(t, "held", im["status"])
	require.Equal(t, runID, im["run_id"])

	ren := cmd("renew", "--run-id", runID, "--ttl", "1m")
	require.Equal(t, demo.ExitOK, ren.code, ren.stderr)
	require.Equal(t, float64(tok), jsonOut(t, ren)["token"])
	other := cmd("renew", "--run-id", uuid.NewString())
	require.Equal(t, demo.ExitRefused, other.code, "a run that never held the lease cannot renew it")

	put := cmd("put", "--token", fmt.Sprint(tok))
	require.Equal(t, demo.ExitOK, put.code, put.stderr)
	pm := jsonOut(t, put)
	require.Equal(t, "accepted", pm["s3"])
	require.Equal(t, "accepted", pm["pg"])
	if tok > 1 {
		stale := cmd("put", "--token", fmt.Sprint(tok-1))
		require.Equal(t, demo.ExitRefused, stale.code, stale.stderr)
		sm := jsonOut(t, stale)
		require.Equal(t, "stale", sm["s3"])
		require.Equal(t, "stale", sm["pg"])
		require.Equal(t, float64(tok-1), sm["pg_presented"])
		require.Equal(t, float64(tok), sm["pg_highest"])
		require.Equal(t, float64(tok), sm["s3_highest"])
	}
	ins = cmd("inspect")
	im = jsonOut(t, ins)
	require.Equal(t, float64(tok), im["pg_mark"])
	require.Equal(t, float64(tok), im["s3_mark"])

	notMine := cmd("release", "--run-id", uuid.NewString())
	require.Equal(t, demo.ExitRefused, notMine.code)
	require.Equal(t, "not-holder", jsonOut(t, notMine)["result"])

	rel := cmd("release", "--run-id", runID)
	require.Equal(t, demo.ExitOK, rel.code, rel.stderr)
	require.Equal(t, "released", jsonOut(t, rel)["result"])
	again := cmd("release", "--run-id", runID)
	require.Equal(t, demo.ExitOK, again.code, "a repeated release is benign")
	require.Equal(t, "already-released", jsonOut(t, again)["result"])

	late := cmd("renew", "--run-id", runID)
	require.Equal(t, demo.ExitRefused, late.code, "a renewal after release changes nothing")
	require.Equal(t, "released", jsonOut(t, late)["status"])
}

// TestServiceUnreachable: a database nobody listens on is an operation
// failure (exit 1), not a usage error.
func TestServiceUnreachable(t *testing.T) {
	r := run(t, "inspect", "--session", "s", "--database-url", "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2")
	require.Equal(t, demo.ExitFailed, r.code, r.stderr)
	require.Contains(t, r.stderr, "PostgreSQL")
}

func TestUseColor(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "NO_COLOR" {
				return v
			}
			return ""
		}
	}
	var buf bytes.Buffer
	require.False(t, demo.UseColor(demo.ColorAuto, &buf, env("")), "not a terminal")
	require.True(t, demo.UseColor(demo.ColorAlways, &buf, env("1")))
	require.False(t, demo.UseColor(demo.ColorNever, &buf, env("")))
	f, err := os.CreateTemp(t.TempDir(), "out")
	require.NoError(t, err)
	defer f.Close()
	require.False(t, demo.UseColor(demo.ColorAuto, f, env("")), "a regular file is not a terminal")
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		defer tty.Close()
		require.True(t, demo.UseColor(demo.ColorAuto, tty, env("")))
		require.False(t, demo.UseColor(demo.ColorAuto, tty, env("1")), "NO_COLOR wins")
	}
}

func TestTextPrinter(t *testing.T) {
	e := demo.Event{Seq: 1, Actor: demo.ActorA, Kind: demo.KindWrite, Outcome: demo.Stale, Token: 7, Detail: "refused"}
	var plain, col bytes.Buffer
	demo.TextPrinter{W: &plain}.Print(e)
	demo.TextPrinter{W: &col, Color: true}.Print(e)
	require.NotContains(t, plain.String(), "\x1b[")
	require.Contains(t, col.String(), "\x1b[")
	require.Equal(t, 1, strings.Count(plain.String(), "\n"), "one line per event")
	require.Contains(t, plain.String(), "token 7")
}
