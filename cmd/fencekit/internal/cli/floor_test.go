package cli_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fencetest"
	"github.com/fencekit/fencekit/guards/pgguard"
	"github.com/fencekit/fencekit/lease"
	"github.com/fencekit/fencekit/sql/migrations"
)

// world is a lease schema and a guard schema on the shared server, a raw
// pool, and the binary's environment.
type world struct {
	t                   *testing.T
	schema, guardSchema string
	url                 string
	raw                 *pgxpool.Pool
	env                 []string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	return &world{t: t, schema: fencetest.Schema(t, migrations.Lease), guardSchema: fencetest.Schema(t, migrations.Guard),
		url: fencetest.DatabaseURL(), raw: fencetest.Pool(t), env: db(fencetest.DatabaseURL())}
}

// fk runs the binary on the world's lease schema.
func (w *world) fk(args ...string) result {
	w.t.Helper()
	return fk(w.t, w.env, append([]string{"--schema", w.schema}, args...)...)
}

func (w *world) exec(sql string, args ...any) {
	w.t.Helper()
	_, err := w.raw.Exec(bg(), sql, args...)
	require.NoError(w.t, err)
}

func (w *world) manager(cfg lease.Config) *lease.Manager {
	w.t.Helper()
	cfg.Pool, cfg.Schema = fencetest.Pool(w.t), w.schema
	m, err := lease.New(cfg)
	require.NoError(w.t, err)
	w.t.Cleanup(func() { _ = m.Close() })
	return m
}

// mark writes once under token through a PostgreSQL guard in the guard
// schema, raising its marks' highest token.
func (w *world) mark(resource string, token fence.Token) {
	w.t.Helper()
	g, err := pgguard.New(pgguard.Config{DB: w.raw, Schema: w.guardSchema})
	require.NoError(w.t, err)
	c := fence.Claim{Token: token, Run: uuid.NewString()}
	require.NoError(w.t, g.Fence(fence.WithClaim(bg(), c), resource, token, func(context.Context) error { return nil }))
}

func (w *world) dump() string {
	w.t.Helper()
	return dump(w.t, w.raw, w.schema, w.guardSchema)
}

func num(t *testing.T, v any) int64 {
	t.Helper()
	f, ok := v.(float64)
	require.True(t, ok, "not a number: %v", v)
	return int64(f)
}

// TestFloorCommands on the shared server: status reports the floor state
// and refusals without changing anything; check passes on the checked
// node, records an unchecked one, and exits 3 recording nothing when the
// guards' marks are above the sequence (grants stay refused); advance
// moves the sequence past the marks and grants resume above them; with
// Patroni's arguments the commands act for a primary only.
func TestFloorCommands(t *testing.T) {
	w := newWorld(t)
	m := w.manager(lease.Config{})
	marksFlags := []string{"--marks-url", w.url, "--marks-schema", w.guardSchema}

	r := w.fk("floor", "status", "--json")
	require.Equal(t, 0, r.code, "%s", r)
	st := r.one(t)
	node := st["node"].(string)
	require.Regexp(t, `^[0-9]+:[0-9]+/[0-9A-F]{8}$`, node)
	require.Equal(t, node, st["checked_node"])
	require.Equal(t, false, st["grants_refused"])
	require.EqualValues(t, 1, num(t, st["next_token"]))

	// The floor row as a promoted replica or a restored dump has it.
	w.exec(fmt.Sprintf(`UPDATE %q.fencekit_token_floor SET checked_node = '1:1/00000001'`, w.schema))
	before := w.dump()
	r = w.fk("floor", "status", "--json")
	require.Equal(t, 0, r.code, "a refusing node is a status, not a failure: %s", r)
	st = r.one(t)
	require.Equal(t, true, st["grants_refused"])
	require.Contains(t, st["refusal"], "checked on 1:1/00000001, running on "+node)
	r = w.fk("floor", "status")
	require.Equal(t, 0, r.code, "%s", r)
	require.Contains(t, r.stdout, "grants:        REFUSED")
	require.Equal(t, before, w.dump(), "status changes nothing")
	r = w.fk("floor", "status", "--json", "--floor", "0")
	require.Equal(t, 0, r.code, "%s", r)
	st = r.one(t)
	require.EqualValues(t, 0, num(t, st["source_floor"]))
	require.Equal(t, "pass", st["check_would"])
	_, err := m.Acquire(bg(), lease.Key{AccountID: "a", SessionID: "s0"})
	require.ErrorIs(t, err, lease.ErrFailoverUnchecked)

	// Patroni: a replica's callback does nothing.
	before = w.dump() // the refused grant drew a token
	r = w.fk("floor", "check", "--floor", "0", "--json", "on_role_change", "replica", "c1")
	require.Equal(t, 0, r.code, "%s", r)
	require.Equal(t, true, r.one(t)["skipped"])
	require.Equal(t, before, w.dump())

	// The marks are above the sequence: check fails, records nothing.
	w.mark("doc-1", 40)
	w.mark("doc-2", 500)
	r = w.fk(append([]string{"floor", "check", "--json"}, marksFlags...)...)
	require.Equal(t, 3, r.code, "%s", r)
	ls := r.lines(t)
	require.Len(t, ls, 2)
	require.Equal(t, false, ls[0]["ok"])
	require.EqualValues(t, 500, num(t, ls[0]["source_floor"]))
	require.EqualValues(t, 3, num(t, ls[1]["exit_code"]))
	require.Contains(t, r.stderr, "grants stay refused")
	r = w.fk(append([]string{"floor", "status", "--json"}, marksFlags...)...)
	require.Equal(t, 0, r.code, "%s", r)
	st = r.one(t)
	require.Equal(t, "1:1/00000001", st["checked_node"], "a failed check records no node")
	require.Equal(t, "fail", st["check_would"])
	require.EqualValues(t, 500, num(t, st["stored_floor"]), "the check stores the source floor")
	_, err = m.Acquire(bg(), lease.Key{AccountID: "a", SessionID: "s1"})
	require.ErrorIs(t, err, lease.ErrFailoverUnchecked)

	// The advance, as a primary's callback: grants resume above the marks.
	r = w.fk(append([]string{"floor", "advance", "--json"}, append(marksFlags, "on_role_change", "primary", "c1")...)...)
	require.Equal(t, 0, r.code, "%s", r)
	rep := r.one(t)
	require.Equal(t, true, rep["ok"])
	require.EqualValues(t, 501, num(t, rep["next_token"]))
	require.Equal(t, node, rep["checked_node"])
	l, err := m.Acquire(bg(), lease.Key{AccountID: "a", SessionID: "s2"})
	require.NoError(t, err)
	require.Greater(t, l.Token(), fence.Token(500))

	// An operator floor above everything: check refuses, advance fixes.
	r = w.fk("floor", "check", "--floor", "1000")
	require.Equal(t, 3, r.code, "%s", r)
	require.Contains(t, r.stdout, "FAILED")
	_, err = m.Acquire(bg(), lease.Key{AccountID: "a", SessionID: "s3"})
	require.ErrorIs(t, err, lease.ErrTokenFloor, "checked node, sequence below the stored floor")
	r = w.fk("floor", "advance", "--floor", "1000", "--json")
	require.Equal(t, 0, r.code, "%s", r)
	require.EqualValues(t, 1001, num(t, r.one(t)["next_token"]))
	r = w.fk("floor", "check", "--floor", "0")
	require.Equal(t, 0, r.code, "%s", r)
	require.Contains(t, r.stdout, "passed on node "+node)
	l, err = m.Acquire(bg(), lease.Key{AccountID: "a", SessionID: "s3"})
	require.NoError(t, err)
	require.Greater(t, l.Token(), fence.Token(1000))
}
