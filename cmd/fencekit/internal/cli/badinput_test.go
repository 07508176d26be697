package cli_test

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/lease"
)

// TestBadInputChangesNothing: every malformed command line — unknown
// flags and commands, malformed identifiers, URLs, durations, keys, run
// ids, negative or absurd floors, values below the library's minimums —
// exits 2 with a message naming the problem, and the schemas' rows and
// sequences are exactly as before (a dump of both schemas compared).
func TestBadInputChangesNothing(t *testing.T) {
	w := newWorld(t)
	m := w.manager(lease.Config{})
	held, err := m.Acquire(bg(), lease.Key{AccountID: "acme", SessionID: "held"})
	require.NoError(t, err)
	rel, err := m.Acquire(bg(), lease.Key{AccountID: "acme", SessionID: "old"})
	require.NoError(t, err)
	_, err = rel.Release(bg())
	require.NoError(t, err)
	w.exec(fmt.Sprintf(`UPDATE %q.fencekit_leases SET released_at = released_at - interval '3 hours', expires_at = expires_at - interval '3 hours' WHERE session_id = 'old'`, w.schema))
	w.mark("doc", 900)
	w.exec(fmt.Sprintf(`UPDATE %q.fencekit_guard_marks SET updated_at = updated_at - interval '48 hours'`, w.guardSchema))
	// Stop renewing before the dumps: a renewal moves expires_at.
	require.NoError(t, m.Close())
	_ = held

	marks := []string{"--marks-url", w.url, "--marks-schema", w.guardSchema}
	cases := []struct {
		args []string
		want string // in stderr
	}{
		{[]string{"leases", "list", "--bogus"}, "unknown flag --bogus"},
		{[]string{"floor", "advance", "--floor", "10", "--nope=1"}, "unknown flag --nope"},
		{[]string{"lease", "list"}, `unknown command "lease"`},
		{[]string{"leases", "delete", "acme", "held"}, `unknown command "delete"`},
		{[]string{"leases"}, "missing command"},
		{[]string{"--schema", "Bad;Name", "leases", "revoke", "acme", "held"}, "--schema: migrations: invalid identifier"},
		{[]string{"--schema", "pg_catalog", "floor", "advance", "--floor", "1"}, "invalid identifier"},
		{[]string{"--schema", `x"; DROP TABLE y; --`, "migrate", "down", "--set", "lease"}, "invalid identifier"},
		{[]string{"--database-url", "postgres://[::1", "leases", "revoke", "acme", "held"}, "--database-url: cannot parse"},
		{[]string{"--database-url", "host=127.0.0.1 port=notaport", "janitor", "sweep"}, "--database-url"},
		{append([]string{"floor", "advance"}, "--marks-url", "::nonsense::", "--marks-schema", w.guardSchema), "--marks-url"},
		{[]string{"floor", "advance", "--marks-url", w.url, "--marks-schema", "Bad-Name"}, "--marks-schema: migrations: invalid identifier"},
		{[]string{"floor", "advance", "--marks-schema", w.guardSchema}, "--marks-schema needs --marks-url"},
		{[]string{"floor", "advance", "--floor", "-1"}, "--floor -1: negative"},
		{[]string{"floor", "advance", "--floor", "9007199254740993"}, "absurd"},
		{[]string{"floor", "advance", "--floor", "9223372036854775807"}, "absurd"},
		{[]string{"floor", "advance", "--floor", "99999999999999999999"}, "not a whole number"},
		{[]string{"floor", "advance", "--floor", "1e6"}, "not a whole number"},
		{[]string{"floor", "check", "--floor", "0x10"}, "not a whole number"},
		{[]string{"floor", "advance"}, "name a floor source"},
		{append([]string{"floor", "advance", "on_role_change", "primary"}, marks...), "Patroni's ACTION ROLE CLUSTER"},
		{[]string{"leases", "revoke", "acme"}, "want ACCOUNT SESSION, got 1"},
		{[]string{"leases", "revoke", "acme", "held", "extra"}, "want ACCOUNT SESSION, got 3"},
		{[]string{"leases", "revoke", "acme", "bad\x01id"}, "control character"},
		{[]string{"leases", "revoke", "", "held"}, "AccountID: empty"},
		{[]string{"leases", "revoke", "acme", strings.Repeat("s", 300)}, "longer than 256 bytes"},
		{[]string{"leases", "revoke", "acme", "held", "--run", "not-a-uuid"}, `--run "not-a-uuid": not a run id`},
		{[]string{"leases", "revoke", "acme", "held", "--run", "00000000-0000-0000-0000-000000000000"}, "not a run id"},
		{[]string{"leases", "list", "--limit", "0"}, "--limit 0"},
		{[]string{"leases", "list", "--account", "a\nb"}, "--account"},
		{[]string{"leases", "watch", "acme", "held", "--poll", "1ms"}, "--poll 1ms: below 10ms"},
		{[]string{"migrate", "down"}, "--set: name the one set"},
		{[]string{"migrate", "down", "--set", "all"}, "--set: name the one set"},
		{[]string{"migrate", "down", "--set", "lease", "--to", "-1"}, "--to -1: negative"},
		{[]string{"migrate", "down", "--set", "lease", "--to", "two"}, `--to "two"`},
		{[]string{"migrate", "up", "--set", "leases"}, `unknown migration set "leases"`},
		{[]string{"janitor", "sweep", "--older-than", "30m"}, "Retention: 30m0s is below 1h0m0s"},
		{[]string{"janitor", "sweep", "--older-than", "2h", "--statement-bound", "5m"}, "100 × StatementBound"},
		{[]string{"janitor", "sweep", "--older-than", "yesterday"}, "not a duration"},
		{[]string{"marks", "prune"}, "--older-than is required"},
		{[]string{"marks", "prune", "--older-than", "30m"}, "below the minimum 1h0m0s"},
		{[]string{"marks", "prune", "--older-than", "2h", "--batch", "5000"}, "--batch 5000"},
		{[]string{"--timeout", "-1s", "leases", "list"}, "--timeout -1s: negative"},
		{[]string{"--timeout", "soon", "leases", "list"}, "not a duration"},
	}
	// The same command lines against a port nothing listens on still exit
	// 2: the input is judged before any connection is opened.
	var lc net.ListenConfig
	ln, err := lc.Listen(bg(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	nowhere := db(fmt.Sprintf("postgres://postgres@%s/test?sslmode=disable", ln.Addr()))
	require.NoError(t, ln.Close())

	before := w.dump()
	for _, c := range cases {
		args := c.args
		if args[0] != "--schema" {
			args = append([]string{"--schema", w.schema}, args...)
		}
		if args[2] == "marks" {
			args[1] = w.guardSchema
		}
		r := fk(t, w.env, append(args, "--json")...)
		require.Equal(t, 2, r.code, "%s", r)
		require.Contains(t, r.stderr, c.want, "%s", r)
		require.Equal(t, 2, int(num(t, r.one(t)["exit_code"])), "%s", r)
		require.Equal(t, before, w.dump(), "%s", r)
		r = fk(t, nowhere, args...)
		require.Equal(t, 2, r.code, "decided without a connection: %s", r)
	}

	// No database named anywhere.
	r := fk(t, nil, "leases", "list")
	require.Equal(t, 2, r.code, "%s", r)
	require.Contains(t, r.stderr, "no database: set --database-url or $DATABASE_URL")
	require.Equal(t, before, w.dump())
}

// TestUnreachableDatabase: a database that cannot be reached fails every
// command with exit 1 and the cause, and so does a schema never migrated
// (the message asks whether it is); the floor commands retry until their
// deadline, printing each wait, and then fail with the last cause.
func TestUnreachableDatabase(t *testing.T) {
	var lc net.ListenConfig
	ln, err := lc.Listen(bg(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close()) // nothing listens there now
	env := db(fmt.Sprintf("postgres://postgres@127.0.0.1:%d/test?sslmode=disable&connect_timeout=2", port))
	for _, args := range [][]string{
		{"migrate", "up"}, {"migrate", "down", "--set", "lease"}, {"migrate", "status"}, {"migrate", "validate"},
		{"floor", "status"}, {"leases", "list"}, {"leases", "inspect", "a", "b"}, {"leases", "revoke", "a", "b"},
		{"leases", "watch", "a", "b"}, {"janitor", "sweep"}, {"marks", "highest"}, {"marks", "prune", "--older-than", "2h"},
	} {
		r := fk(t, env, args...)
		require.Equal(t, 1, r.code, "%s", r)
		require.Contains(t, r.stderr, "connection refused", "%s", r)
		require.Contains(t, r.stderr, fmt.Sprintf("127.0.0.1:%d", port), "%s", r)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %s", r)
	}
	// A schema that was never migrated: exit 1, and the message says so.
	w := newWorld(t)
	for _, args := range [][]string{{"leases", "list"}, {"floor", "status"}, {"janitor", "sweep"}} {
		r := fk(t, w.env, append([]string{"--schema", "fk_never_migrated"}, args...)...)
		require.Equal(t, 1, r.code, "%s", r)
		require.Contains(t, r.stderr, `is schema "fk_never_migrated" migrated?`, "%s", r)
	}
	for _, cmd := range []string{"check", "advance"} {
		start := time.Now()
		r := fk(t, env, "floor", cmd, "--floor", "0", "--timeout", "1500ms")
		require.Equal(t, 1, r.code, "%s", r)
		require.GreaterOrEqual(t, time.Since(start), 1500*time.Millisecond, "it waited for the database")
		require.Contains(t, r.stderr, "does not accept writes yet (attempt 2", "%s", r)
		require.Contains(t, r.stderr, "timed out after 1.5s (--timeout)", "%s", r)
		require.Contains(t, r.stderr, "connection refused", "%s", r)
	}
}
