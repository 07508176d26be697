package cli_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/lease"
)

// TestHousekeepingCommands: janitor sweep deletes exactly the lease rows
// older than --older-than; marks highest reads the highest mark; marks
// prune deletes exactly the marks idle longer than --older-than.
func TestHousekeepingCommands(t *testing.T) {
	w := newWorld(t)
	m := w.manager(lease.Config{})
	for i := range 5 {
		l, err := m.Acquire(bg(), lease.Key{AccountID: "acme", SessionID: fmt.Sprintf("s%d", i)})
		require.NoError(t, err)
		if i < 4 {
			_, err = l.Release(bg())
			require.NoError(t, err)
		}
	}
	// Three released rows released three hours ago; one released now; one held.
	w.exec(fmt.Sprintf(`UPDATE %q.fencekit_leases SET released_at = released_at - interval '3 hours', expires_at = expires_at - interval '3 hours'
		WHERE session_id IN ('s0', 's1', 's2')`, w.schema))

	r := w.fk("janitor", "sweep", "--older-than", "2h", "--json")
	require.Equal(t, 0, r.code, "%s", r)
	j := r.one(t)
	require.EqualValues(t, 3, num(t, j["deleted"]))
	require.Equal(t, false, j["more"])
	r = w.fk("leases", "list", "--json")
	require.Equal(t, 0, r.code, "%s", r)
	require.Len(t, r.lines(t), 2, "the recent and the held rows stay")
	r = w.fk("janitor", "sweep")
	require.Equal(t, 0, r.code, "%s", r)
	require.Contains(t, r.stdout, "deleted 0 lease row(s) older than 24h0m0s")

	w.mark("doc-a", 7)
	w.mark("doc-b", 42)
	w.mark("doc-c", 9)
	marks := []string{"--schema", w.guardSchema}
	r = fk(t, w.env, append(marks, "marks", "highest", "--json")...)
	require.Equal(t, 0, r.code, "%s", r)
	require.EqualValues(t, 42, num(t, r.one(t)["highest"]))

	w.exec(fmt.Sprintf(`UPDATE %q.fencekit_guard_marks SET updated_at = updated_at - interval '48 hours' WHERE resource IN ('doc-a', 'doc-b')`, w.guardSchema))
	r = fk(t, w.env, append(marks, "marks", "prune", "--older-than", "24h", "--json", "--batch", "1")...)
	require.Equal(t, 0, r.code, "%s", r)
	j = r.one(t)
	require.EqualValues(t, 2, num(t, j["deleted"]))
	require.EqualValues(t, 3, num(t, j["batches"]), "batches of one until one is not full")
	r = fk(t, w.env, append(marks, "marks", "highest")...)
	require.Equal(t, 0, r.code, "%s", r)
	require.Contains(t, r.stdout, ": 9\n")
}
