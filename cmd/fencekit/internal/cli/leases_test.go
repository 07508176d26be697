package cli_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/lease"
)

// TestLeasesCommands: list and inspect show what the holders' Managers
// hold; revoke ends a live grant (the holder's renewal is refused, its
// context ends, the next grant takes a larger token) while watch, running
// meanwhile, prints each change as one JSON line; a revoke of a key nobody
// holds, or of a run that no longer holds it, exits 0 with the state.
func TestLeasesCommands(t *testing.T) {
	w := newWorld(t)
	holder := w.manager(lease.Config{TTL: 3 * time.Second})
	other := w.manager(lease.Config{})
	k := func(a, s string) lease.Key { return lease.Key{AccountID: a, SessionID: s} }
	stuck, err := holder.Acquire(bg(), k("acme", "s1"), lease.WithHolder("desktop"))
	require.NoError(t, err)
	rel, err := holder.Acquire(bg(), k("acme", "s2"))
	require.NoError(t, err)
	_, err = rel.Release(bg())
	require.NoError(t, err)
	beta, err := holder.Acquire(bg(), k("beta", "s1"))
	require.NoError(t, err)

	r := w.fk("leases", "list", "--json")
	require.Equal(t, 0, r.code, "%s", r)
	ls := r.lines(t)
	require.Len(t, ls, 3)
	require.Equal(t, []any{"acme", "s1", "held", "desktop"}, []any{ls[0]["account"], ls[0]["session"], ls[0]["state"], ls[0]["holder"]})
	require.Equal(t, "released", ls[1]["state"])
	require.Equal(t, "beta", ls[2]["account"])
	r = w.fk("leases", "list", "--account", "acme", "--held", "--json")
	require.Equal(t, 0, r.code, "%s", r)
	require.Equal(t, "s1", r.one(t)["session"])
	r = w.fk("leases", "list", "--limit", "2")
	require.Equal(t, 0, r.code, "%s", r)
	require.Contains(t, r.stdout, "ACCOUNT")
	require.Contains(t, r.stderr, "more keys follow the first 2")

	r = w.fk("leases", "inspect", "acme", "s1", "--json")
	require.Equal(t, 0, r.code, "%s", r)
	j := r.one(t)
	require.Equal(t, "held", j["state"])
	require.Equal(t, stuck.RunID().String(), j["run_id"])
	require.EqualValues(t, stuck.Token(), num(t, j["token"]))
	require.Positive(t, num(t, j["remaining_ms"]))

	watch := start(t, w.env, "--schema", w.schema, "leases", "watch", "acme", "s1", "--json", "--poll", "50ms")
	event := func() map[string]any { // the next event other than the holder's renewals
		for {
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(watch.line(t, 30*time.Second)), &m))
			if m["event"] != "renewed" {
				return m
			}
		}
	}
	ev := event()
	require.Equal(t, "current", ev["event"])
	require.Equal(t, "held", ev["state"])
	// --count ends the watch after that many events.
	one := start(t, w.env, "--schema", w.schema, "leases", "watch", "acme", "s1", "--json", "--count", "1")
	done := one.wait(t, 30*time.Second)
	require.Equal(t, 0, done.code, "%s", done)
	require.Len(t, done.lines(t), 1)
	require.Equal(t, "current", done.one(t)["event"])

	r = w.fk("leases", "revoke", "acme", "s1", "--json")
	require.Equal(t, 0, r.code, "%s", r)
	j = r.one(t)
	require.Equal(t, true, j["revoked"])
	require.Equal(t, stuck.RunID().String(), j["revoked_run_id"])
	require.Equal(t, "expired", j["state"])
	ev = event()
	require.Equal(t, "expired", ev["event"])
	require.Equal(t, stuck.RunID().String(), ev["run_id"])

	select { // the holder's next background renewal is refused
	case <-stuck.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the revoked lease's context did not end")
	}
	require.ErrorIs(t, context.Cause(stuck.Context()), lease.ErrLost)
	_, err = holder.Renew(bg(), k("acme", "s1"), stuck.RunID())
	require.ErrorIs(t, err, lease.ErrLost, "the revoked holder's renewal is refused")
	next, err := other.Acquire(bg(), k("acme", "s1"), lease.WithHolder("browser"))
	require.NoError(t, err)
	require.Greater(t, next.Token(), stuck.Token())
	ev = event()
	require.Equal(t, "granted", ev["event"])
	require.Equal(t, "browser", ev["holder"])
	require.EqualValues(t, next.Token(), num(t, ev["token"]))

	// Naming the revoked run leaves the new grant alone.
	r = w.fk("leases", "revoke", "acme", "s1", "--run", stuck.RunID().String())
	require.Equal(t, 0, r.code, "%s", r)
	require.Contains(t, r.stdout, "nothing to revoke")
	require.Contains(t, r.stdout, `is held by "browser"`)
	_, err = next.Renew(bg())
	require.NoError(t, err)
	// Nobody holds these. The Managers are closed first (their leases
	// released): their renewals and liveness heartbeats would change the
	// rows the dumps compare.
	require.NoError(t, holder.Close())
	require.NoError(t, other.Close())
	require.ErrorIs(t, context.Cause(beta.Context()), lease.ErrClosed)
	for _, key := range [][]string{{"acme", "s2"}, {"acme", "never"}} {
		before := w.dump()
		r = w.fk("leases", "revoke", key[0], key[1], "--json")
		require.Equal(t, 0, r.code, "%s", r)
		j = r.one(t)
		require.Equal(t, false, j["revoked"])
		require.Contains(t, []any{"released", "not-found"}, j["state"])
		require.Equal(t, before, w.dump())
	}
}
