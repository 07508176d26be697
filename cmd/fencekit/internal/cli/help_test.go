package cli_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
)

// every command of the binary, as "<group> <name>".
var everyCommand = []string{
	"migrate up", "migrate down", "migrate status", "migrate validate",
	"floor status", "floor check", "floor advance",
	"leases list", "leases inspect", "leases revoke", "leases watch",
	"janitor sweep", "marks highest", "marks prune",
}

// TestHelp: --help on every command (also before it, and as "help <cmd>")
// prints its usage, flags, the global flags and the exit codes on stdout
// and exits 0 without any database; the top-level help lists every
// command; no command line prints usage for nothing.
func TestHelp(t *testing.T) {
	r := fk(t, nil, "--help")
	require.Equal(t, 0, r.code, "%s", r)
	for _, c := range everyCommand {
		f := strings.Fields(c)
		require.Regexp(t, `(?m)^  `+f[0]+` .*\b`+f[1]+`\b`, r.stdout, "the overview lists %s", c)
	}
	require.Contains(t, r.stdout, "Exit codes:")
	r = fk(t, nil, "help")
	require.Equal(t, 0, r.code, "%s", r)
	r = fk(t, nil)
	require.Equal(t, 2, r.code, "%s", r)
	require.Contains(t, r.stderr, "missing command")

	for _, c := range everyCommand {
		f := strings.Fields(c)
		for _, args := range [][]string{{f[0], f[1], "--help"}, {"--help", f[0], f[1]}, {"help", f[0], f[1]}, {f[0], f[1], "-h"}} {
			r := fk(t, nil, args...)
			require.Equal(t, 0, r.code, "%s", r)
			require.Contains(t, r.stdout, "Usage: fencekit "+c+" [flags]", "%s", r)
			require.Contains(t, r.stdout, "--database-url URL", "%s", r)
			require.Contains(t, r.stdout, "Exit codes:", "%s", r)
			require.Empty(t, r.stderr)
		}
	}
	r = fk(t, nil, "floor", "check", "--help")
	require.Contains(t, r.stdout, "--marks-url URL")
	require.Contains(t, r.stdout, "Patroni")
	r = fk(t, nil, "leases", "--help")
	require.Equal(t, 0, r.code, "%s", r)
	require.Contains(t, r.stdout, "revoke")
	r = fk(t, nil, "version", "--json")
	require.Equal(t, 0, r.code, "%s", r)
	require.Contains(t, r.one(t), "version")
}

// TestExecModes: the commands that read and write leases and the floor
// work when the connection string selects any pgx exec mode (simple
// protocol and exec included: what PgBouncer's transaction pooling allows).
func TestExecModes(t *testing.T) {
	for _, mode := range []string{"cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			w := newWorld(t)
			w.env = db(fencetest.DatabaseURL() + "&default_query_exec_mode=" + mode)
			m := w.manager(lease.Config{})
			l, err := m.Acquire(bg(), lease.Key{AccountID: "acme", SessionID: "s1"})
			require.NoError(t, err)
			w.mark("doc", 3)
			for _, args := range [][]string{
				{"migrate", "status"}, {"migrate", "validate", "--set", "lease"}, {"migrate", "up", "--set", "lease"},
				{"floor", "status"}, {"floor", "check", "--floor", "0"},
				{"floor", "advance", "--marks-url", w.url + "&default_query_exec_mode=" + mode, "--marks-schema", w.guardSchema},
				{"leases", "list", "--account", "acme", "--held"}, {"leases", "inspect", "acme", "s1"},
				{"leases", "revoke", "acme", "s1", "--run", l.RunID().String()},
				{"janitor", "sweep"},
			} {
				r := w.fk(append(args, "--json")...)
				require.Equal(t, 0, r.code, "%s", r)
				r.lines(t)
			}
			o, err := m.Inspect(bg(), l.Key())
			require.NoError(t, err)
			require.Equal(t, lease.StateExpired, o.State, "revoked")
			r := fk(t, w.env, "--schema", w.guardSchema, "marks", "highest", "--json")
			require.Equal(t, 0, r.code, "%s", r)
			require.EqualValues(t, 3, num(t, r.one(t)["highest"]))
		})
	}
}
