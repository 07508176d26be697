package cli_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/effects"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// TestEffectsCommands: effects list shows recorded effects; retry reopens
// an ambiguous one; cancel cancels a pending one; both refuse other
// states; a malformed id is a usage error.
func TestEffectsCommands(t *testing.T) {
	schema := fencetest.Schema(t, migrations.Lease, migrations.Effects)
	w := &world{t: t, schema: schema, url: fencetest.DatabaseURL(), raw: fencetest.Pool(t), env: db(fencetest.DatabaseURL())}
	m := w.manager(lease.Config{})
	o, err := effects.New(effects.Config{Pool: w.raw, Schema: schema, Targets: []effects.Target{{Name: "hook"}}})
	require.NoError(t, err)
	l, err := m.Acquire(bg(), lease.Key{AccountID: "acme", SessionID: "s1"})
	require.NoError(t, err)
	a, err := o.Record(l.Context(), effects.Effect{Target: "hook", RequestKey: "a", Request: []byte("x")})
	require.NoError(t, err)
	b, err := o.Record(l.Context(), effects.Effect{Target: "hook", RequestKey: "b", Request: []byte("y")})
	require.NoError(t, err)
	w.exec(fmt.Sprintf(`UPDATE %q.fencekit_effects SET state = 'ambiguous', final_at = clock_timestamp() WHERE id = $1`, schema), a)

	r := w.fk("effects", "list", "--json")
	require.Equal(t, 0, r.code, "%s", r)
	require.Len(t, r.lines(t), 2)
	r = w.fk("effects", "list", "--json", "--state", "ambiguous")
	require.Equal(t, 0, r.code, "%s", r)
	require.Equal(t, a.String(), r.one(t)["id"])

	r = w.fk("effects", "retry", a.String(), "--json")
	require.Equal(t, 0, r.code, "%s", r)
	require.Equal(t, "pending", r.one(t)["state"])
	r = w.fk("effects", "cancel", b.String(), "--json", "--reason", "duplicate order")
	require.Equal(t, 0, r.code, "%s", r)
	require.Equal(t, "canceled", r.one(t)["state"])
	require.Contains(t, r.one(t)["detail"], "duplicate order")

	r = w.fk("effects", "retry", b.String())
	require.Equal(t, 1, r.code, "%s", r)
	require.Contains(t, r.stderr, "not in a state")
	r = w.fk("effects", "cancel", "not-an-id")
	require.Equal(t, 2, r.code, "%s", r)
	r = w.fk("effects", "list", "--state", "lost")
	require.Equal(t, 2, r.code, "%s", r)
	r = w.fk("effects", "list")
	require.Equal(t, 0, r.code, "%s", r)
	require.Contains(t, r.stdout, "REQUEST KEY")
}
